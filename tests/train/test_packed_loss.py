"""Packed training equals unpacked training on the same examples: the same loss and the same gradients.

Each run is one optimizer step's batch holding every example: padded (one example a row) or packed
(padding-free rows of whole examples, positions restarting at 0 per example, no attention mask).
Through the trainer's own data path and loss (:class:`coa.train.sft_trainer.CoaSFTTrainer`), with
each attention kernel that runs on a CPU. A packed batch whose positions do not restart (the
documents then attend to each other) gives another loss: the check can fail.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import torch

from coa.train import SFTRunConfig
from coa.train.kernels import liger_loss, liger_unavailable, resolve_liger
from coa.train.sft_trainer import build_trainer

from .rows import arith_rows

N_EXAMPLES = 10


def _one_batch(tiny_model: Path, rows: pa.Table, tmp_path: Path, packing: bool, **settings: Any) -> Any:
    config = SFTRunConfig(
        base_model=str(tiny_model), max_steps=1, max_length=512, heldout_fraction=0.0, packing=packing,
        batch_size=N_EXAMPLES, **settings,  # every example (or packed row) in the one batch
    )  # fmt: skip
    built = build_trainer(rows, config, tmp_path / ("packed" if packing else "padded"))
    batches = list(built.trainer.get_train_dataloader())
    assert len(batches) == 1
    return built.trainer, batches[0]


def _loss_and_grads(trainer: Any, batch: dict[str, Any]) -> tuple[float, dict[str, torch.Tensor]]:
    model = trainer.model
    model.train()
    model.zero_grad()
    trained = int((batch["labels"][:, 1:] != -100).sum())
    loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=torch.tensor(trained))
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return float(loss.detach()), grads


@pytest.mark.parametrize(
    "settings",
    [
        {"attn_implementation": "sdpa"},  # the CPU default: LM head at the trained positions only
        {"attn_implementation": "eager"},
        {"attn_implementation": "sdpa", "fused_lm_head": True},  # TRL's chunked head (the GPU default)
        {"attn_implementation": "sdpa", "fused_lm_head": False, "head_positions": "all"},  # the model's loss
    ],
    ids=["sdpa", "eager", "sdpa-fused-head", "sdpa-model-loss"],
)
def test_packed_training_equals_unpacked_training(tiny_model: Path, tmp_path: Path, settings: dict) -> None:
    rows = arith_rows(N_EXAMPLES, seed=3)
    padded_trainer, padded = _one_batch(tiny_model, rows, tmp_path, packing=False, **settings)
    packed_trainer, packed = _one_batch(tiny_model, rows, tmp_path, packing=True, **settings)
    assert "attention_mask" not in packed and packed["input_ids"].shape[0] == 1  # padding-free
    assert (packed["position_ids"][0] == 0).sum() == N_EXAMPLES  # every example, packed once
    assert int((packed["labels"] != -100).sum()) == int((padded["labels"] != -100).sum())

    padded_loss, padded_grads = _loss_and_grads(padded_trainer, padded)
    packed_loss, packed_grads = _loss_and_grads(packed_trainer, packed)

    assert packed_loss == pytest.approx(padded_loss, rel=1e-5, abs=1e-6)
    assert packed_grads.keys() == padded_grads.keys() and padded_grads
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)

    # the same packed tokens with positions that run on across examples: each example now attends to
    # the ones before it in its row, and the loss moves
    leaking = {**packed, "position_ids": torch.arange(packed["input_ids"].shape[1]).unsqueeze(0)}
    leaking = {k: v for k, v in leaking.items() if not k.startswith(("cu_seq", "max_length", "seq_idx"))}
    leak_loss, _ = _loss_and_grads(packed_trainer, leaking)
    assert abs(leak_loss - padded_loss) > 1e-3


def test_liger_falls_back_with_a_reason_where_it_cannot_run(caplog: pytest.LogCaptureFixture) -> None:
    """On a CPU (or without liger-kernel / Triton) asking for Liger never fails a run: it says why."""
    assert resolve_liger(False, cuda=True) is False
    reason = liger_unavailable(cuda=False)
    assert reason is not None and "CUDA" in reason
    with caplog.at_level(logging.INFO, logger="coa.train.sft"):
        assert resolve_liger(True, cuda=False) is False
        assert resolve_liger("auto", cuda=False) is False
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "need a CUDA GPU" in warnings[0].getMessage()
    assert "standard loss path" in warnings[0].getMessage()


def test_a_run_asking_for_liger_on_a_cpu_trains_on_the_standard_path(
    tiny_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="coa.train.sft"):
        trainer, batch = _one_batch(
            tiny_model, arith_rows(4, seed=0), tmp_path, packing=True, liger_kernel=True
        )
    assert trainer.coa_liger is False
    assert any("sft.liger_kernel" in r.getMessage() for r in caplog.records)
    loss, _ = _loss_and_grads(trainer, batch)
    assert loss > 0 and torch.isfinite(torch.tensor(loss))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_flex_attention_packs_without_leakage_on_a_gpu(tiny_model: Path, tmp_path: Path) -> None:
    """flex_attention (compiled; minutes on a CPU) keeps packed examples apart like the padded run."""
    rows = arith_rows(N_EXAMPLES, seed=3)
    settings = {"attn_implementation": "flex_attention", "bf16": False}
    padded_trainer, padded = _one_batch(tiny_model, rows, tmp_path, packing=False, **settings)
    packed_trainer, packed = _one_batch(tiny_model, rows, tmp_path, packing=True, **settings)
    cuda = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in padded.items()}
    padded_loss, _ = _loss_and_grads(padded_trainer, cuda)
    cuda = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in packed.items()}
    packed_loss, _ = _loss_and_grads(packed_trainer, cuda)
    assert packed_loss == pytest.approx(padded_loss, rel=1e-4)


def test_the_liger_loss_is_the_models_loss_at_the_trained_positions(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """:func:`liger_loss` around Liger's kernel (here its reference: cross-entropy of ``input @ weight.T``,
    as Liger documents it; the Triton kernel itself needs CUDA) gives the trainer's loss and gradients:
    the same positions, targets and normalisation, packed or not."""
    import sys
    import types

    def reference(input, weight, target, bias=None, ignore_index=-100, reduction="mean", **_: Any):
        logits = input @ weight.T + (bias if bias is not None else 0)
        return torch.nn.functional.cross_entropy(
            logits, target, ignore_index=ignore_index, reduction=reduction
        )

    functional = types.ModuleType("liger_kernel.transformers.functional")
    functional.liger_fused_linear_cross_entropy = reference  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.functional", functional)
    rows = arith_rows(N_EXAMPLES, seed=3)
    for packing in (False, True):
        trainer, batch = _one_batch(tiny_model, rows, tmp_path / str(packing), packing=packing)
        plain_loss, plain_grads = _loss_and_grads(trainer, batch)
        trainer.coa_liger = True
        liger, grads = _loss_and_grads(trainer, batch)
        assert liger == pytest.approx(plain_loss, rel=1e-6)
        for name, grad in plain_grads.items():
            torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)
    trained = int((batch["labels"][:, 1:] != -100).sum())
    assert float(liger_loss(trainer.model, dict(batch))) == pytest.approx(liger, rel=1e-6)  # its own count
    assert float(liger_loss(trainer.model, dict(batch), torch.tensor(2 * trained))) == pytest.approx(
        liger / 2
    )
