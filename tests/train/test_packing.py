"""Padding-free packing keeps every example's labels and keeps examples from attending to each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import torch

from coa.format import IGNORE_INDEX
from coa.train import SFTRunConfig
from coa.train.data import encode_examples
from coa.train.sft_trainer import build_trainer


def _segments(position_ids: torch.Tensor) -> list[tuple[int, int]]:
    starts = (position_ids == 0).nonzero().flatten().tolist()
    return list(zip(starts, [*starts[1:], len(position_ids)], strict=True))


def test_packed_batch_keeps_per_example_labels(
    tiny_model: Path,
    tokenizer: Any,
    sft_rows: pa.Table,
    tmp_path: Path,
) -> None:
    max_length = 512  # room for two or three ~180-token examples per packed row
    config = SFTRunConfig(
        base_model=str(tiny_model), max_steps=1, batch_size=2, max_length=max_length, packing=True,
        heldout_fraction=0.0,  # every example in the packed rows
    )  # fmt: skip
    built = build_trainer(sft_rows, config, tmp_path)
    assert built.trainer.padding_free  # TRL 1.16: bfd packing implies padding-free collation
    encoded = encode_examples(sft_rows, tokenizer, max_length)
    by_ids = {tuple(ids): labels for ids, labels in zip(encoded.input_ids, encoded.labels, strict=True)}
    seen = 0
    for batch in built.trainer.get_train_dataloader():
        assert "attention_mask" not in batch  # the mask comes from the position ids
        ids, labels, pos = batch["input_ids"][0], batch["labels"][0], batch["position_ids"][0]
        assert ids.shape == labels.shape == pos.shape and batch["input_ids"].shape[0] == 1
        segments = _segments(pos)
        assert len(segments) >= 2
        for a, b in segments:
            assert pos[a:b].tolist() == list(range(b - a))  # positions restart per example
            expected = by_ids[tuple(ids[a:b].tolist())]
            assert labels[a:b].tolist() == expected  # the example's own labels, unchanged
            assert expected[0] == IGNORE_INDEX  # so no loss crosses from one example into the next
            seen += 1
    assert seen == len(encoded.input_ids)  # every example packed exactly once


def test_packed_forward_equals_separate_forwards(
    tiny_model: Path, tokenizer: Any, sft_rows: pa.Table, tmp_path: Path
) -> None:
    """The block-diagonal mask from position ids (CPU, SDPA): packed logits == per-example logits."""
    config = SFTRunConfig(base_model=str(tiny_model), max_steps=1, batch_size=2, max_length=512, packing=True)
    built = build_trainer(sft_rows, config, tmp_path)
    batch = next(iter(built.trainer.get_train_dataloader()))
    model = built.trainer.model.eval()
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
        for a, b in _segments(batch["position_ids"][0]):
            alone = model(input_ids=batch["input_ids"][:, a:b]).logits[0]
            torch.testing.assert_close(packed[a:b], alone, atol=1e-4, rtol=1e-4)
