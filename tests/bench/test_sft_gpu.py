"""``bench/bench_sft_gpu.py``: the profile's student the GPU benches time (built on CPU here)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

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
