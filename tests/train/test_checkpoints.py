"""Checkpoints are written atomically and rotated over complete ones only; a save killed half-way
is never read, the rerun resumes from the last complete checkpoint and ends with the same weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import torch
import transformers

from coa.kit import checkpoints
from coa.kit.run import last_checkpoint
from coa.train import SFTRunConfig
from coa.train.sft import run_sft
from tests.train.test_sft import _config, _weights


def _checkpoint(root: Path, step: int, complete: bool = True, state: str | None = None) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights")
    if complete:
        (path / checkpoints.TRAINER_STATE).write_text(state if state is not None else json.dumps({"s": step}))
    return path


def test_only_complete_checkpoints_are_read_rotated_and_named(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    _checkpoint(root, 100)
    _checkpoint(root, 200)
    _checkpoint(root, 300, complete=False)  # killed before its trainer state
    _checkpoint(root, 400, state='{"global_step": 4')  # killed while writing it
    (root / checkpoints.STAGING_DIR / "checkpoint-500").mkdir(parents=True)
    assert [p.name for p in checkpoints.complete_checkpoints(root)] == ["checkpoint-100", "checkpoint-200"]
    assert last_checkpoint(root) == root / "checkpoint-200"
    assert checkpoints.describe_resume(root) == f"resumes from checkpoint 200 ({root / 'checkpoint-200'})"
    checkpoints.rotate(root, keep=1)  # the incomplete ones do not push the last complete one out
    assert last_checkpoint(root) == root / "checkpoint-200" and not (root / "checkpoint-100").exists()
    checkpoints.clean(root)
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-200"]
    empty = tmp_path / "empty"
    assert checkpoints.describe_resume(empty) == f"starts from step 0 (no complete checkpoint in {empty})"


def test_a_save_killed_half_way_leaves_no_checkpoint_and_the_rerun_ends_the_same(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config: SFTRunConfig = _config(tiny_model, save_total_limit=1)
    original = transformers.Trainer._save_rng_state

    def killed_at_6(self: Any, output_dir: str) -> None:
        if self.state.global_step == 6:  # the weights and optimizer are written, the state is not
            raise KeyboardInterrupt("killed while writing checkpoint-6")
        original(self, output_dir)

    monkeypatch.setattr(transformers.Trainer, "_save_rng_state", killed_at_6)
    with pytest.raises(KeyboardInterrupt):
        run_sft(sft_rows, config, tmp_path / "run")
    folder = tmp_path / "run" / "checkpoints"
    assert not (folder / "checkpoint-6").exists()  # only under .staging, never read
    assert (folder / checkpoints.STAGING_DIR / "checkpoint-6" / "model.safetensors").exists()
    assert last_checkpoint(folder) == folder / "checkpoint-3"  # rotation kept the last complete one
    monkeypatch.setattr(transformers.Trainer, "_save_rng_state", original)

    resumed = run_sft(sft_rows, config, tmp_path / "run", resume=True)
    assert (resumed.start_step, resumed.steps_run, resumed.global_step) == (3, 3, 6)
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint-6"]  # staging gone, limit 1
    straight = run_sft(sft_rows, config, tmp_path / "straight")
    a, b = _weights(resumed.model_dir), _weights(straight.model_dir)
    assert all(torch.allclose(a[k], b[k]) for k in a)
