"""sft.v1 rows → input_ids + labels: exactly the observation tokens (and the prompt) are masked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import schemas
from coa.format import (
    IGNORE_INDEX,
    FormatError,
    chat_text,
    check_observation_spans,
    label_chat,
    observation_spans,
)
from coa.train import SFTRunConfig
from coa.train.data import ExampleError, encode_examples
from coa.train.sft_trainer import build_trainer

from .rows import arith_rows


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def test_real_batch_masks_exactly_the_observations(
    tiny_model: Path, tokenizer: Any, sft_rows: pa.Table, tmp_path: Path
) -> None:
    """A batch from the trainer's own dataloader: prompt and observation tokens are -100, the rest trained."""
    config = SFTRunConfig(base_model=str(tiny_model), max_steps=1, batch_size=4, max_length=512)
    built = build_trainer(sft_rows, config, tmp_path)
    batch = next(iter(built.trainer.get_train_dataloader()))
    contents = {m[2]["content"] for m in sft_rows.column("messages").to_pylist()}
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    checked = 0
    for ids_t, labels_t, mask_t in zip(
        batch["input_ids"], batch["labels"], batch["attention_mask"], strict=True
    ):
        n = int(mask_t.sum())
        ids, labels = ids_t[:n].tolist(), labels_t[:n].tolist()
        assert all(lab == IGNORE_INDEX for lab in labels_t[n:].tolist())  # padding never trained
        # The assistant turn starts after the last <|im_start|> and its "assistant\n" header.
        turn = max(i for i, t in enumerate(ids) if t == im_start)
        header = next(
            i for i in range(turn, n) if _decode(tokenizer, ids[turn : i + 1]).endswith("assistant\n")
        )
        assert all(lab == IGNORE_INDEX for lab in labels[: header + 1])  # the whole prompt
        body = range(header + 1, n)
        content = _decode(tokenizer, ids[header + 1 :]).removesuffix("<|im_end|>\n")
        assert content in contents
        spans = observation_spans(content)
        masked = _decode(tokenizer, [ids[i] for i in body if labels[i] == IGNORE_INDEX])
        assert masked == "".join(content[a:b] for a, b in spans)
        assert masked.startswith("<observation>\n") and masked.endswith("\n</observation>\n")
        trained = [i for i in body if labels[i] != IGNORE_INDEX]
        assert all(labels[i] == ids[i] for i in trained)
        rest = content[: spans[0][0]] + content[spans[0][1] :]
        assert _decode(tokenizer, [ids[i] for i in trained]) == rest + "<|im_end|>\n"
        checked += 1
    assert checked == 4


def test_truncation_and_dropping_are_counted(tokenizer: Any) -> None:
    rows = arith_rows(3)
    full = encode_examples(rows, tokenizer, None)
    prompt_len = min(next(i for i, t in enumerate(lab) if t != IGNORE_INDEX) for lab in full.labels)
    cut = encode_examples(rows, tokenizer, prompt_len + 5)
    assert cut.n_truncated == 3 and cut.n_dropped == 0
    assert all(len(ids) == prompt_len + 5 for ids in cut.input_ids)
    assert [lab[: prompt_len + 5] for lab in full.labels] == cut.labels
    with pytest.raises(ExampleError, match="no trainable example"):
        encode_examples(rows, tokenizer, prompt_len - 2)


def test_training_masks_the_stored_spans_that_conversion_checked(tokenizer: Any) -> None:
    """Training reads ``observation_spans`` and never scans the text again: spans corrupted after
    conversion change the mask exactly as the column says; conversion's check rejects such spans."""
    row = arith_rows(1).to_pylist()[0]
    content = row["messages"][2]["content"]
    spans = [(s["start"], s["end"]) for s in row["observation_spans"]]
    assert spans and spans == observation_spans(content)
    check_observation_spans(content, spans)  # what conversion wrote passes its check
    (a, b), rest = spans[0], spans[1:]
    shifted = [(a + len("<observation>\n"), b), *rest]  # a span that leaves out its opening tag
    with pytest.raises(FormatError, match="observation_spans.*not one observation segment"):
        check_observation_spans(content, shifted)
    with pytest.raises(FormatError, match="observations, the spans"):
        check_observation_spans(content, rest)  # an observation left unmasked

    def labels(stored: list[tuple[int, int]]) -> list[int]:
        corrupt = dict(row, observation_spans=[{"start": x, "end": y} for x, y in stored])
        return encode_examples(schemas.SFT.from_rows([corrupt]), tokenizer, None).labels[0]

    system, question = row["messages"][0]["content"], row["messages"][1]["content"]
    text, start = chat_text(tokenizer, system, question, content)
    ids, expected = label_chat(tokenizer, text, start)  # the spans found in the text
    assert labels(spans) == expected
    assert labels(shifted) == label_chat(tokenizer, text, start, shifted)[1] != expected
    unmasked = labels([])  # no stored span: every token of the trajectory is trained, the prompt not
    first = next(i for i, t in enumerate(expected) if t != IGNORE_INDEX)
    assert unmasked[:first] == [IGNORE_INDEX] * first and unmasked[first:] == ids[first:]


def test_disordered_spans_and_bad_roles_are_rejected(tokenizer: Any) -> None:
    row = arith_rows(1).to_pylist()[0]
    backwards = dict(
        row, observation_spans=[{"start": s["end"], "end": s["start"]} for s in row["observation_spans"]]
    )
    with pytest.raises(ExampleError, match="ex0@code_math: stored observation_spans .* out of order"):
        encode_examples(schemas.SFT.from_rows([backwards]), tokenizer, None)
    swapped = dict(row, messages=[row["messages"][1], row["messages"][0], row["messages"][2]])
    with pytest.raises(ExampleError, match=r"messages must be \[system, user, assistant\]"):
        encode_examples(schemas.SFT.from_rows([swapped]), tokenizer, None)


def test_repeat_gives_a_family_more_of_the_examples(tokenizer: Any) -> None:
    rows = arith_rows(6)
    families = ["code" if i % 3 == 0 else "math" for i in range(rows.num_rows)]
    rows = rows.set_column(rows.schema.get_field_index("family"), "family", pa.array(families))
    once = encode_examples(rows, tokenizer, None)
    repeated = encode_examples(rows, tokenizer, None, {"code": 3})
    ids = rows.column("example_id").to_pylist()
    assert repeated.example_ids == [
        i for i, f in zip(ids, families, strict=True) for _ in range(3 if f == "code" else 1)
    ]
    assert repeated.n_rows == once.n_rows == 6  # the table's rows; the examples trained per epoch: 10
    first = {e: enc for e, enc in zip(repeated.example_ids, repeated.input_ids, strict=True)}
    assert [first[e] for e in once.example_ids] == once.input_ids
    # a family the data lacks repeats nothing (a profile's sft.repeat on math-only data)
    assert encode_examples(rows, tokenizer, None, {"mhqa": 2}).example_ids == once.example_ids
    with pytest.raises(ValueError, match="sft repeat counts must be >= 1"):
        SFTRunConfig(base_model="m", repeat={"code": 0})
    with pytest.raises(ValueError, match=r"sft.repeat names unknown families \['programming'\]"):
        SFTRunConfig(base_model="m", repeat={"programming": 3})  # the synthetic generator's name


def test_the_trainer_trains_on_the_repeated_examples(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    families = ["code" if i % 4 == 0 else "math" for i in range(sft_rows.num_rows)]
    rows = sft_rows.set_column(sft_rows.schema.get_field_index("family"), "family", pa.array(families))
    config = SFTRunConfig(
        base_model=str(tiny_model), max_steps=1, batch_size=4, repeat={"code": 5}, heldout_fraction=0.25
    )
    built = build_trainer(rows, config, tmp_path)
    trained = built.encoded.example_ids
    held = set(rows.column("example_id").to_pylist()) - set(trained)
    code = {e for e, f in zip(rows.column("example_id").to_pylist(), families, strict=True) if f == "code"}
    assert len(built.trainer.train_dataset) == len(trained)
    assert all(trained.count(e) == (5 if e in code else 1) for e in set(trained))
    assert held and built.n_heldout == len(held)  # held-out examples are never repeated
