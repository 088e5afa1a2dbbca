"""``sft.v1`` rows → token ids and loss labels, through the CoA format module only.

For each example (``messages`` = system, user, one assistant message holding the whole CoA
trajectory):

1. the stored ``observation_spans`` are the spans to mask: conversion checked them against the
   assistant content when it wrote them (:func:`coa.format.check_observation_spans`), so training
   never scans the text for observations again; only their order is checked here (cheap);
2. :func:`coa.format.chat_text` renders the chat with the tokenizer's own chat template and returns
   where the assistant content starts (it fails if the template does not keep the content verbatim);
3. :func:`coa.format.label_chat` tokenizes it and labels it: ``-100`` on every prompt token and on
   every token touching a stored observation span, the trajectory's own tokens and the end-of-turn
   token trained.

Sequences longer than ``max_length`` keep their start (their labels are cut with them); a sequence
left with no trained token (a prompt that fills ``max_length``) is dropped. Both are counted in
:class:`EncodedExamples` so a run reports what it lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from coa.errors import UserError
from coa.format import IGNORE_INDEX, chat_text, label_chat
from coa.train.config import SFTError


class ExampleError(UserError, ValueError):
    """An ``sft.v1`` row that cannot be trained on; the message names the example and the reason."""


@dataclasses.dataclass
class EncodedExamples:
    """Token ids and labels per example, plus what encoding cut or dropped."""

    input_ids: list[list[int]]
    labels: list[list[int]]
    example_ids: list[str]
    n_rows: int
    n_truncated: int
    n_dropped: int

    @property
    def n_tokens(self) -> int:
        return sum(len(ids) for ids in self.input_ids)

    @property
    def n_trained_tokens(self) -> int:
        return sum(sum(1 for t in labels if t != IGNORE_INDEX) for labels in self.labels)

    def as_columns(self) -> dict[str, list[list[int]]]:
        return {"input_ids": self.input_ids, "labels": self.labels}


def split_messages(example_id: str, messages: list[dict[str, str]]) -> tuple[str, str, str]:
    """``(system, question, content)`` of an ``sft.v1`` conversation; anything else is an error."""
    roles = [m["role"] for m in messages]
    if roles != ["system", "user", "assistant"]:
        raise ExampleError(f"{example_id}: messages must be [system, user, assistant], got {roles}")
    return messages[0]["content"], messages[1]["content"], messages[2]["content"]


def encode_example(tokenizer: Any, row: dict[str, Any]) -> tuple[list[int], list[int]]:
    """``(input_ids, labels)`` of one ``sft.v1`` row (no truncation)."""
    example_id = str(row.get("example_id", "?"))
    system, question, content = split_messages(example_id, row["messages"])
    spans = [(s["start"], s["end"]) for s in row.get("observation_spans") or []]
    end = 0
    for a, b in spans:
        if not end <= a < b <= len(content):
            raise ExampleError(
                f"{example_id}: stored observation_spans {spans} are out of order or outside the "
                f"assistant content (length {len(content)}); the row is corrupt (re-run the convert stage)"
            )
        end = b
    text, start = chat_text(tokenizer, system, question, content)
    return label_chat(tokenizer, text, start, spans)


def encode_examples(
    examples: pa.Table, tokenizer: Any, max_length: int | None, repeat: Mapping[str, int] | None = None
) -> EncodedExamples:
    """Encode an ``sft.v1`` table (checked against the contract) for training; each example of a
    family in ``repeat`` comes that many times (``sft.repeat``), the others once (a family the data
    lacks repeats nothing: a profile's ``sft.repeat`` also serves data of fewer families)."""
    import schemas

    table = schemas.SFT.conform(examples)
    repeat = repeat or {}
    out = EncodedExamples([], [], [], n_rows=table.num_rows, n_truncated=0, n_dropped=0)
    for row in table.select(["example_id", "family", "messages", "observation_spans"]).to_pylist():
        ids, labels = encode_example(tokenizer, row)
        if max_length is not None and len(ids) > max_length:
            ids, labels = ids[:max_length], labels[:max_length]
            out.n_truncated += 1
        if all(t == IGNORE_INDEX for t in labels):
            out.n_dropped += 1
            continue
        for _ in range(repeat.get(row["family"], 1)):
            out.input_ids.append(ids)
            out.labels.append(labels)
            out.example_ids.append(row["example_id"])
    if not out.input_ids:
        raise ExampleError(
            f"no trainable example among {out.n_rows} rows ({out.n_dropped} dropped: nothing trained "
            f"within max_length={max_length})"
        )
    return out


def select_examples(examples: pa.Table, families: Sequence[str] | None) -> pa.Table:
    """The rows of the configured families (all when ``families`` is None); none left is an error.
    The SFT step selects them (its lineage counts them) and so does a run from a file
    (``python -m coa.train.sft``, ``sft.families`` carried in its config): the same rows either way."""
    if families is None:
        return examples
    chosen = examples.filter(pc.is_in(examples["family"], pa.array(list(families))))
    if chosen.num_rows == 0:
        present = sorted(set(examples.column("family").to_pylist()))
        raise SFTError(f"no SFT example of families {list(families)}; the data holds {present}")
    return chosen
