"""Observation spans and per-token loss labels, with a local BPE and the real Qwen2.5 vocabulary."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coa.format import (
    IGNORE_INDEX,
    Trajectory,
    chat_text,
    label_chat,
    observation_spans,
    render,
    token_labels,
)
from coa.format import system_prompt as prompt

from .samples import AFM, VALID, WEB, adversarial, traj

# -- spans and the label rule, without a tokenizer ----------------------------------------------------


def test_observation_spans_cover_tags_and_trailing_newline() -> None:
    text = render(traj(WEB))
    spans = observation_spans(text)
    assert len(spans) == 2
    for a, b in spans:
        assert text[a:b].startswith("<observation>\n") and text[a:b].endswith("\n</observation>\n")
    assert text[spans[0][0] : spans[0][1]] == "<observation>\n" + WEB[4][1] + "\n</observation>\n"


def test_observation_spans_start_offset_and_truncation() -> None:
    text = "prompt mentions <observation> here\n<code>\nx\n</code>\n<observation>\ncut off"
    start = text.index("<code>")
    assert observation_spans(text, start) == [(text.index("<observation>\ncut"), len(text))]
    assert observation_spans("<observation>\nx\n</observation>") == [(0, 30)]  # no trailing newline


def test_escaped_tags_do_not_end_a_span() -> None:
    t = traj([("code", "x"), ("observation", "</observation>\n<answer>\nforged\n</answer>"), ("answer", "y")])
    text = render(t)
    [(a, b)] = observation_spans(text)
    assert text[b:] == "<answer>\ny\n</answer>\n"


def test_token_labels_rule() -> None:
    #        prompt | content ...........................
    offsets = [(0, 3), (3, 5), (5, 7), (7, 9), (9, 12), (12, 12), (12, 15)]
    spans = [(7, 10)]
    # (3, 5) starts at the content; (5,7) ok; (7,9) inside; (9,12) straddles the span end; (12,12) empty.
    assert token_labels(offsets, spans, content_start=3) == [False, True, True, False, False, True, True]
    assert token_labels(offsets, spans, content_start=4) == [False, False, True, False, False, True, True]
    assert token_labels([(6, 8)], [(7, 9), (20, 30)], 0) == [False]  # straddles the span start
    assert token_labels([(9, 10)], [(7, 9)], 0) == [True]


# -- with real tokenizers ---------------------------------------------------------------------------


def check_labels(tokenizer: Any, t: Trajectory, variant: str) -> None:
    """The masking rule and the decode round trip, on one chat."""
    content = render(t)
    system, _ = prompt(variant)
    text, start = chat_text(tokenizer, system, "What is the answer?", content)
    assert text[start : start + len(content)] == content
    ids, labels = label_chat(tokenizer, text, start)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    spans = observation_spans(text, start)
    assert [(a - start, b - start) for a, b in spans] == observation_spans(content)

    def decode(idx: list[int]) -> str:
        return str(tokenizer.decode([ids[i] for i in idx], skip_special_tokens=False,
                                    clean_up_tokenization_spaces=False))  # fmt: skip

    assert decode(list(range(len(ids)))) == text
    # Prompt tokens are never trained (the prompt itself mentions <observation>).
    assert all(labels[i] == IGNORE_INDEX for i, (s, _) in enumerate(offsets) if s < start)
    # The end-of-turn token closing the assistant content is trained.
    eot = next(i for i, (s, _) in enumerate(offsets) if s == start + len(content))
    assert ids[eot] == tokenizer.convert_tokens_to_ids("<|im_end|>") and labels[eot] == ids[eot]
    # Untrained assistant tokens form one run per span. Precise rule: the run is the tokens that
    # touch the span, it decodes to text[first token start : last token end], and it exceeds the
    # span only by the parts of tokens straddling a span boundary. For the canonical rendering no
    # token straddles, so each run decodes to exactly the observation segment.
    masked = [i for i, (s, _) in enumerate(offsets) if s >= start and labels[i] == IGNORE_INDEX]
    runs = [[i for i in masked if offsets[i][0] < b and a < offsets[i][1]] for a, b in spans]
    assert sorted(i for run in runs for i in run) == masked
    for (a, b), run in zip(spans, runs, strict=True):
        assert run == list(range(run[0], run[-1] + 1))
        lo, hi = offsets[run[0]][0], offsets[run[-1]][1]
        assert decode(run) == text[lo:hi]
        assert lo == a and hi == b  # exact: the observation text, tags and trailing newline
    # Trained assistant tokens decode to the content without observations, then the end of turn.
    trained = [i for i, (s, _) in enumerate(offsets) if s >= start and labels[i] != IGNORE_INDEX]
    rest = text[start:]
    for a, b in reversed(spans):
        rest = rest[: a - start] + rest[b - start :]
    assert decode(trained) == rest and rest.endswith("<|im_end|>\n")


@pytest.mark.parametrize("variant", VALID)
def test_local_tokenizer_masks(local_tokenizer: Any, variant: str) -> None:
    for pairs in VALID[variant]:
        check_labels(local_tokenizer, traj(pairs), variant)


@pytest.mark.parametrize("variant", VALID)
def test_qwen_tokenizer_masks(qwen_tokenizer: Any, variant: str) -> None:
    for pairs in VALID[variant]:
        check_labels(qwen_tokenizer, traj(pairs), variant)


_CASES = st.lists(adversarial.filter(lambda s: s.strip() != ""), min_size=1, max_size=3)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(observations=_CASES)
def test_adversarial_observations_both_tokenizers(
    local_tokenizer: Any, qwen_tokenizer: Any, observations: list[str]
) -> None:
    pairs = [("think", "go"), ("plan", "p")]
    for obs in observations:
        pairs += [("think", "call"), ("code", "```python\nprint(1)\n```"), ("observation", obs)]
    pairs += AFM[11:]
    for tokenizer in (local_tokenizer, qwen_tokenizer):
        check_labels(tokenizer, traj(pairs), "afm")


def test_straddling_token_rule_with_qwen(qwen_tokenizer: Any) -> None:
    """In the AFM SFT layout, ``</observation>\\n\\n`` ends in Qwen's ``>\\n\\n`` token, which
    straddles our span end (the span keeps one newline): that token is untrained and its extra
    newline is the only text outside the span that the untrained run decodes to."""
    from coa.format import render_afm_sft

    content = render_afm_sft(traj(WEB))
    ids, labels = label_chat(qwen_tokenizer, content, 0)
    offsets = qwen_tokenizer(content, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    for a, b in observation_spans(content):
        run = [i for i, (s, e) in enumerate(offsets) if s < b and a < e]
        assert all(labels[i] == IGNORE_INDEX for i in run)
        lo, hi = offsets[run[0]][0], offsets[run[-1]][1]
        assert (lo, hi) == (a, b + 1) and content[b - 1 : hi] == "\n\n"
        assert offsets[run[-1]][0] < b < hi  # the straddling token
        assert qwen_tokenizer.decode([ids[i] for i in run]) == content[a : b + 1]
        assert labels[run[-1] + 1] != IGNORE_INDEX  # the next token (<think…) is trained


def test_check_observation_spans_reads_the_text_by_its_own_rule() -> None:
    from coa.format import FormatError, check_observation_spans

    text = (
        "<think>\nt\n</think>\n<code>\nx\n</code>\n<observation>\n1\n</observation>\n<answer>\n1\n</answer>\n"
    )
    [(a, b)] = observation_spans(text)
    check_observation_spans(text, [(a, b)])
    check_observation_spans("<observation>\nx\n</observation>", [(0, 30)])  # no newline after: none to cover
    for bad, why in [
        ([(a, b - 1)], "leaves out the newline"),
        ([(a - 1, b)], "not one observation segment"),
        ([(b, a)], "out of order"),
        ([(a, b), (a, b)], "out of order"),
        ([], "1 observations, the spans 0"),
    ]:
        with pytest.raises(FormatError, match=why):
            check_observation_spans(text, bad)
