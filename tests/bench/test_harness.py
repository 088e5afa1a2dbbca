"""The bench harness (bench/harness.py): shared arguments, timings, ratios and one JSON record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.scripts import load_script


def test_a_bench_writes_its_record_with_the_ratio_against_its_baseline(tmp_path: Path) -> None:
    harness = load_script("harness")
    calls = {"fast": 0, "slow": 0}

    def run(args, bench) -> None:
        fast = bench.time("fast", lambda: calls.__setitem__("fast", calls["fast"] + 1), repeat=args.repeat)
        slow = bench.add_timing("slow", [2.0, 3.0, 4.0])
        bench.ratio("fast / slow", fast, slow)
        bench.figure("tokens_per_s", 12.5)

    out = tmp_path / "r" / "bench.json"
    record = harness.main(run, "A test bench.", argv=["--repeat", "4", "--json", str(out)], name="t")
    assert calls["fast"] == 4
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(record, default=str))
    assert saved["bench"] == "t" and saved["args"]["repeat"] == 4
    assert saved["timings"]["slow"] == {"min_s": 2.0, "median_s": 3.0, "max_s": 4.0, "runs": 3}
    assert saved["ratios"]["fast / slow"] == pytest.approx(saved["timings"]["fast"]["min_s"] / 2.0)
    assert saved["figures"] == {"tokens_per_s": 12.5}
    assert saved["machine"]["cores"] >= 1 and saved["machine"]["cpu"]
    assert not list(out.parent.glob("*.tmp"))


def test_a_zero_baseline_and_an_empty_timing_are_errors() -> None:
    harness = load_script("harness")
    bench = harness.Bench("t", {})
    with pytest.raises(ValueError, match="baseline is 0"):
        bench.ratio("x", 1.0, 0.0)
    with pytest.raises(ValueError, match="no runs"):
        bench.add_timing("x", [])


def test_the_contract_bench_runs_quick(tmp_path: Path) -> None:
    script = load_script("bench_contract")
    harness = load_script("harness")
    argv = ["--quick", "--repeat", "1"]
    record = harness.main(script.run, script.__doc__, argv=argv, name="bench_contract")
    assert record["figures"]["rows"] == 2_000
    assert record["ratios"]["checked / raw"] > 0


def test_a_bench_may_leave_repeat_to_its_quick_size() -> None:
    harness = load_script("harness")
    seen = []
    harness.main(lambda args, bench: seen.append(args.repeat), "t", argv=["--quick"], name="t", repeat=None)
    harness.main(
        lambda args, bench: seen.append(args.repeat), "t", argv=["--repeat", "5"], name="t", repeat=None
    )
    assert seen == [None, 5]
