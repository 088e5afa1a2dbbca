"""``bench/bench_sft_gpu.py`` and ``bench/bench_rl_gpu.py`` on a CPU: the profile's student, the MFU peaks,
the rollout comparison, the plain path after a Liger failure, the record written as it is measured (their
--quick runs under accelerate, in the GPU check on the CPU twin: tests/infra/test_twin.py)."""

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


def test_a_liger_failure_costs_the_liger_figure_and_reruns_on_the_plain_path(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kernel that fails only on a GPU (Liger's Triton kernels) costs one figure, not the part."""
    bench = load_script("bench_sft_gpu")
    from coa.train import kernels

    monkeypatch.setattr(kernels, "liger_unavailable", lambda cuda: None)  # as on a GPU with Liger installed
    calls: list[object] = []

    def start(liger: object) -> dict[str, object]:
        calls.append(liger)
        if liger is not False:
            raise SystemExit("accelerate launch failed:\ntriton.runtime.errors.OutOfResources: shared memory")
        return {"tokens_per_s": 10.0}

    run = bench.plain_if_liger_fails("0.5b ours", start, "auto", True)
    assert calls == ["auto", False] and run["tokens_per_s"] == 10.0
    assert run["path"] == "plain (Liger failed: triton.runtime.errors.OutOfResources: shared memory)"
    assert capsys.readouterr().out.count("warning: 0.5b ours: the run with Liger's kernels failed") == 1

    calls.clear()

    def works(liger: object) -> dict[str, object]:
        calls.append(liger)
        return {}

    worked = bench.plain_if_liger_fails("x", works, "auto", True)
    assert worked["path"] == "liger"
    assert calls == ["auto"]  # Liger worked: one run
    monkeypatch.setattr(kernels, "liger_unavailable", lambda cuda: "no CUDA")
    assert bench.plain_if_liger_fails("x", lambda liger: {}, "auto", False)["path"] == "plain"
    with pytest.raises(SystemExit):  # a plain run's failure is the part's: no second try
        bench.plain_if_liger_fails("x", lambda liger: (_ for _ in ()).throw(SystemExit("boom")), False, True)


def test_a_bench_record_is_on_disk_from_the_first_figure(tmp_path: Path) -> None:
    """A part stopped at its bound (``timeout``) still returns what it measured."""
    harness = load_script("harness")
    sink = tmp_path / "out" / "sft.json"
    bench = harness.Bench("bench_sft_gpu", {}, sink=sink)
    bench.figure("0.5b", {"ours": {"tokens_per_s": 11322.0}})
    record = json.loads(sink.read_text())
    assert record["figures"]["0.5b"]["ours"]["tokens_per_s"] == 11322.0 and record["complete"] is False
    bench.ratio("ours / bare TRL", 2.0, 1.0)
    bench.save(complete=True)
    record = json.loads(sink.read_text())
    assert record["ratios"] == {"ours / bare TRL": 2.0} and record["complete"] is True
    assert not list(sink.parent.glob("*.tmp"))  # written whole, then renamed
