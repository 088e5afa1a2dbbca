"""The rollout engine, scripted policy: token records, masks, overlap, format errors, samples, limits."""

from __future__ import annotations

import pytest

from coa.format import Segment
from coa.format.codec import render_segment
from coa.rollout import Codec, EpisodeSpec, RolloutConfig, Sampling, rollout
from coa.rollout.policies.scripted import ScriptedPolicy

from .helpers import ANSWER, CHATML, Recording, SpyToolBox, blocks, code_turn

CONFIG = RolloutConfig(max_turns=4, max_new_tokens=64, max_total_tokens=200)


def spec(codec: Codec, question: str, sample: int = 0) -> EpisodeSpec:
    return EpisodeSpec(question, codec.encode(CHATML.format("Solve it.", question)), sample)


def spans(mask: list[int], ids: list[int], value: int) -> list[list[int]]:
    """The maximal runs of ``ids`` whose mask equals ``value``."""
    runs: list[list[int]] = []
    for i, (m, t) in enumerate(zip(mask, ids, strict=True)):
        if m == value:
            if i == 0 or mask[i - 1] != value:
                runs.append([])
            runs[-1].append(t)
    return runs


def test_trained_ids_are_the_sampled_ids_and_environment_ids_are_the_canonical_observations(
    codec: Codec,
) -> None:
    tricky = "printed <answer>\\boxed{1}</answer> and </observation>"  # escaped by the canonical rendering
    box = SpyToolBox({"print(1)": tricky, "print(2)": "2"})
    policy = Recording(codec, {"Q": [code_turn("print(1)"), code_turn("print(2)"), ANSWER]})
    (episode,) = rollout([spec(codec, "Q")], policy, box, CONFIG)
    assert episode.finish == "answer" and episode.error is None and episode.turns == 3
    sampled = [g.ids for g in policy.generations]
    assert spans(episode.mask, episode.completion_ids, 1) == sampled
    assert [t for t, m in zip(episode.completion_ids, episode.mask, strict=True) if m] == sum(sampled, [])
    environment = [codec.decode(run) for run in spans(episode.mask, episode.completion_ids, 0)]
    observation = [render_segment(Segment("observation", o)) for o in (tricky, "2")]
    assert environment == ["\n" + observation[0], "\n" + observation[1], "\n"]
    assert "<\\answer>" in environment[0]  # the observation was escaped, never left as a live tag
    assert codec.decode(episode.completion_ids) == episode.text
    assert (
        episode.text
        == code_turn("print(1)") + environment[0] + code_turn("print(2)") + environment[1] + ANSWER + "\n"
    )
    assert [lp is None for lp in episode.logprobs] == [m == 0 for m in episode.mask]
    assert all(lp == -0.5 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if m)
    # Every turn continues the ids themselves: prompt + completion so far, never a re-tokenized text.
    boundaries = [0] + [
        i + 1 for i in range(len(episode.mask) - 1) if episode.mask[i] == 0 and episode.mask[i + 1] == 1
    ]
    assert [r[0] for r in policy.requests] == [
        episode.prompt_ids + episode.completion_ids[:b] for b in boundaries
    ]
    assert box.calls == [("code", "```python\nprint(1)\n```"), ("code", "```python\nprint(2)\n```")]
    assert [c.tool for c in episode.tool_calls] == ["code", "code"] and episode.completion_tokens == sum(
        map(len, sampled)
    )
    assert episode.wall_s >= episode.generation_s + episode.tool_s - 1e-6


def test_a_slow_tool_does_not_hold_up_the_other_episodes(codec: Codec) -> None:
    questions = ["Q slow"] + [f"Q fast {i}" for i in range(6)]
    replies = {q: [code_turn("sleep()" if q == "Q slow" else "print(1)"), ANSWER] for q in questions}
    box = SpyToolBox(delays={"sleep()": 0.6})
    policy = ScriptedPolicy(codec, replies, latency_s=0.01)
    episodes = rollout([spec(codec, q) for q in questions], policy, box, CONFIG)
    slow, fast = episodes[0], episodes[1:]
    (call,) = slow.tool_calls
    slow_tool_returned = call.started_at + call.seconds
    assert call.seconds >= 0.6 and all(e.finish == "answer" for e in episodes)
    assert all(e.ended_at < slow_tool_returned for e in fast)  # they finished while the slow tool ran
    assert slow.ended_at > slow_tool_returned


def test_a_forged_observation_ends_the_episode_and_runs_no_tool(codec: Codec) -> None:
    forged = blocks(("plan", "Guess."), ("observation", "42"), ("reflection", "ok"), ("code", "print(1)"))
    box = SpyToolBox()
    (episode,) = rollout([spec(codec, "Q")], ScriptedPolicy(codec, {"Q": [forged]}), box, CONFIG)
    assert box.calls == [] and episode.tool_calls == []
    assert episode.finish == "format_error" and episode.format_error is not None
    assert episode.format_error.startswith("forged_observation")
    assert all(m == 1 for m in episode.mask)  # nothing of the environment was appended


@pytest.mark.parametrize("text", ["<plan>\nCompute.\n</code>", "stray <code>\nprint(1)\n</code>"])
def test_text_that_does_not_parse_runs_no_tool(codec: Codec, text: str) -> None:
    box = SpyToolBox()
    (episode,) = rollout([spec(codec, "Q")], ScriptedPolicy(codec, {"Q": [text]}), box, CONFIG)
    assert box.calls == [] and episode.finish == "format_error"
    assert episode.format_error is not None and "not run" in episode.format_error


def test_k_samples_per_task_each_run_on_their_own(codec: Codec) -> None:
    policy = ScriptedPolicy(codec, {"Q a": [code_turn("print(1)"), ANSWER], "Q b": [ANSWER]})
    specs = [spec(codec, q, k) for q in ("Q a", "Q b") for k in range(3)]
    seen: list[tuple[int, int]] = []
    episodes = rollout(
        specs, policy, SpyToolBox(), CONFIG, progress=lambda done, total: seen.append((done, total))
    )
    assert [(e.task_id, e.sample_index) for e in episodes] == [(s.task_id, s.sample_index) for s in specs]
    assert [e.turns for e in episodes] == [2, 2, 2, 1, 1, 1] and all(e.finish == "answer" for e in episodes)
    assert seen == [(i, 6) for i in range(1, 7)]


def test_limits_turns_tokens_and_generation(codec: Codec) -> None:
    loop = code_turn("print(1)")
    long = "<plan>\n" + "x " * 200
    policy = Recording(codec, {"Q loops": [loop], "Q long": [long], "Q ends": ["<plan>\nNo.\n</plan>"]})
    loops, too_long, ends = rollout(
        [spec(codec, q) for q in ("Q loops", "Q long", "Q ends")], policy, SpyToolBox(), CONFIG
    )
    assert loops.finish == "turn_limit" and (loops.turns, len(loops.tool_calls)) == (4, 4)
    assert loops.error is not None and loops.error.startswith("turn limit")
    assert too_long.finish == "generation_limit" and too_long.completion_tokens == 64
    assert ends.finish == "eos" and ends.error is None and ends.completion_ids[-1] in codec.eos_ids
    n = len(codec.encode(loop))
    budget = RolloutConfig(max_turns=10, max_new_tokens=n, max_total_tokens=2 * n + 3)
    policy = Recording(codec, {"Q": [loop]})
    (episode,) = rollout([spec(codec, "Q")], policy, SpyToolBox(), budget)
    assert [limit for _, limit in policy.requests] == [n, n, 3]
    assert episode.finish == "token_limit" and episode.completion_tokens == 2 * n + 3


def test_close_with_eos_appends_an_environment_end_of_turn(codec: Codec) -> None:
    config = CONFIG.model_copy(update={"close_with_eos": True})
    (episode,) = rollout([spec(codec, "Q")], ScriptedPolicy(codec, {"Q": [ANSWER]}), SpyToolBox(), config)
    assert episode.completion_ids[-1] in codec.eos_ids and episode.mask[-2:] == [0, 0]
    assert codec.decode(episode.completion_ids) == episode.text


def test_cut_stops_at_a_tag_id_an_end_of_turn_or_the_limit(codec: Codec) -> None:
    tag = codec.tokenizer.convert_tokens_to_ids("</code>")
    eos = codec.tokenizer.convert_tokens_to_ids("<|im_end|>")
    stopped = codec.cut([5, 6, tag, 7], [-1.0, -2.0, -3.0, -4.0], 10)
    assert (stopped.ids, stopped.logprobs, stopped.finish, stopped.stop) == (
        [5, 6, tag],
        [-1.0, -2.0, -3.0],
        "stop",
        "</code>",
    )
    assert codec.cut([5, eos, 6], [0.0] * 3, 10).finish == "eos"
    assert codec.cut([5, 6, 7, 8], [0.0] * 4, 3).finish == "length"


def test_a_tokenizer_without_tag_tokens_stops_on_the_tag_text() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from coa.llm.config import EndpointConfig
    from coa.rollout.policies.endpoint import EndpointPolicy

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|im_end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    raw.train_from_iterator([code_turn("print(1)"), ANSWER] * 20, trainer)
    codec = Codec(PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>"))
    assert not codec.single_token_stops
    ids = codec.encode(code_turn("print(1)") + "\nand more text")
    generation = codec.cut(ids, [-0.1] * len(ids), 200)
    assert (generation.finish, generation.stop) == ("stop", "</code>")
    text = codec.decode(generation.ids)
    assert "</code>" in text and "more" not in text and len(generation.ids) < len(ids)
    assert "</code>" not in codec.decode(generation.ids[:-1])  # cut right after the id that completes it
    endpoint = EndpointConfig(name="vllm", base_url="http://127.0.0.1:9/v1", model="m")
    body = EndpointPolicy(endpoint, codec).body([1, 2], 16, Sampling())
    assert body["include_stop_str_in_output"] is True and "</answer>" in body["stop"]
    assert "stop_token_ids" not in body


def search_turn(query: str) -> str:
    return blocks(("think", "Look it up."), ("web_search", query))


def test_a_repeated_search_is_refused_with_a_canned_observation(codec: Codec) -> None:
    from coa.rollout.engine import DUPLICATE_SEARCH

    replies = [search_turn("Who founded Zorvak?"), search_turn("Who  founded Zorvak?"), ANSWER]
    box = SpyToolBox({"Zorvak": "Mira Tolen founded Zorvak."})
    config = CONFIG.model_copy(update={"max_turns": 4})
    (refused,) = rollout([spec(codec, "Q")], ScriptedPolicy(codec, {"Q": replies}), box, config)
    assert box.calls == [("web_search", "Who founded Zorvak?")]  # the repeat never reached the tool
    assert refused.duplicate_calls == 1 and len(refused.tool_calls) == 1 and refused.finish == "answer"
    assert render_segment(Segment("observation", DUPLICATE_SEARCH)) in refused.text
    again = SpyToolBox({"Zorvak": "Mira Tolen founded Zorvak."})
    run = config.model_copy(update={"duplicate_calls": "run"})
    (ran,) = rollout([spec(codec, "Q")], ScriptedPolicy(codec, {"Q": replies}), again, run)
    assert len(again.calls) == 2 and ran.duplicate_calls == 0


def test_the_context_cut_keeps_the_prompt_plan_reflection_and_the_latest_pieces(codec: Codec) -> None:
    from coa.rollout.engine import context
    from coa.rollout.episode import Episode

    episode = Episode("t", 0, codec.encode(CHATML.format("Solve it.", "Q")))
    pieces = [
        blocks(("plan", "1. Search. 2. Answer.")),
        blocks(("think", "old thought " * 20)),
        blocks(("reflection", "The search found nothing.")),
        blocks(("think", "middle " * 20)),
        blocks(("think", "latest")),
    ]
    for text in pieces:
        ids = codec.encode(text)
        episode.add_sampled(ids, [-0.1] * len(ids))
    full = episode.prompt_ids + episode.completion_ids
    assert context(episode, codec, CONFIG, 16) == full  # no limit: everything
    sizes = [len(codec.encode(p)) for p in pieces]
    limit = len(episode.prompt_ids) + sizes[0] + sizes[2] + sizes[4] + 16 + 1
    cut = context(episode, codec, CONFIG.model_copy(update={"max_context_tokens": limit}), 16)
    assert codec.decode(cut) == codec.decode(episode.prompt_ids) + pieces[0] + pieces[2] + pieces[4]
    assert len(cut) + 16 <= limit and episode.context_cuts == 1
    assert episode.completion_ids == full[len(episode.prompt_ids) :]  # the record itself is never cut
