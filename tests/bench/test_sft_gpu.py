"""``bench/bench_sft_gpu.py`` and ``bench/bench_rl_gpu.py`` on a CPU: the profile's student, the MFU peaks,
the rollout comparison (their --quick runs under accelerate: tests/infra/test_gpu_check_dry_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ..train.rows import arith_rows
from .scripts import load_script


def test_a_profiles_student_is_left_random_whatever_pretraining_the_profile_asks(tmp_path: Path) -> None:
    """The benches time steps: the profile's pretraining (GPU demo: ~130 s) outlasted their 120 s."""
    bench = load_script("bench_sft_gpu")
    profile = tmp_path / "profile.yaml"
    profile.write_text(
        "student:\n  tiny: {vocab_size: 512, hidden_size: 32, num_layers: 2, num_heads: 4, num_kv_heads: 2,\n"
        "         intermediate_size: 64, pretrain_steps: 5000}\nsft:\n  families: [math]\n"
    )
    data = tmp_path / "sft.parquet"
    pq.write_table(arith_rows(40, seed=0), data)

    model, table, layers = bench.profile_student(profile, data, tmp_path / "out")

    card = json.loads((model / "coa_model.json").read_text())
    assert card["config"]["pretrain_steps"] == 0
    assert card["config"]["hidden_size"] == 32 and card["config"]["num_layers"] == 2  # the profile's shape
    assert table.num_rows == 40 and layers["student"]["tiny"]["pretrain_steps"] == 5000


def test_the_peak_is_read_from_the_device_name_most_specific_first() -> None:
    mfu = load_script("mfu")
    assert mfu.peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert mfu.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert mfu.peak_tflops("NVIDIA H200") == 989.4
    assert mfu.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert mfu.peak_tflops("NVIDIA L40S") == 362.1 and mfu.peak_tflops("NVIDIA L4") == 121.0
    assert mfu.peak_tflops("AMD EPYC, 2 threads") is None and mfu.peak_tflops(None) is None
    # 0.5 B parameters at 100k tokens/s is 3e14 FLOP/s: 30% of a 1 PFLOP/s peak
    assert mfu.mfu(100_000, 500_000_000, 1000.0) == pytest.approx(0.3)
