"""bench_demo_seeds: the demo's plan under several seeds, the spread of the held-out figures."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_demo_seeds", REPO / "bench" / "bench_demo_seeds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_spread_is_over_seeds_per_family() -> None:
    bench = load_bench()
    runs = {
        s: {"metrics": {"math": {"accuracy": a, "format_valid": 1.0}}, "sft_steps_per_min": 400.0}
        for s, a in ((0, 0.38), (1, 1.0), (2, 0.82))
    }
    text, summary = bench.table(runs)
    math = summary["math.accuracy"]
    assert (math["min"], math["max"]) == (0.38, 1.0) and math["mean"] == pytest.approx(0.7333, abs=1e-4)
    assert math["sd"] == pytest.approx(0.3189, abs=1e-4) and summary["math.format_valid"]["sd"] == 0.0
    assert "38%" in text and "seed 2" in text
    assert bench.seed_overrides(3, fixed_data=True) == ["student.tiny.seed=3", "sft.seed=3", "rl=null"]
    assert bench.seed_overrides(3, fixed_data=False)[0] == "synthetic.seed=3"


def test_quick_run_trains_one_student_per_seed(
    storage_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "seeds.json"
    assert load_bench().main(["--quick", "--seeds", "0,1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert set(runs) == {"0", "1"} and runs["0"]["evaluation"] != runs["1"]["evaluation"]
    assert all(r["sft_steps"] == 4 and r["sft_steps_per_min"] > 0 for r in runs.values())
    assert set(result["spread"]["all.accuracy"]["per_seed"]) == {"0", "1"}
