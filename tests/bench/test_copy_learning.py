"""bench_copy_learning: when the demo student learns each copy, tied against untied embeddings."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.scripts import REPO, load_script, run_bench


def load_bench() -> ModuleType:
    return load_script("bench_copy_learning")


def test_copy_positions_are_the_copied_characters() -> None:
    bench = load_bench()
    text = (
        "Evaluate 974 * 291 - 263.<plan>\n1. Expression: 974 * 291 - 263.\n2. Ask code_agent.\n</plan>"
        "<code>result = 974 * 291 - 263</code><observation>[STDOUT:BEGIN]\n283171\n[STDOUT:END]</observation>"
        "<reflection>\nThe program ran and printed '283171'.\n</reflection>"
        "<answer>\n\\boxed{283171}\n</answer>"
    )
    pieces = [p for p in text.replace(" *", "\0 *").replace(" -", "\0 -").split("\0")]
    pieces = [c for p in pieces for c in ([p[:2], *p[2:]] if p[:2] in (" *", " -") else list(p))]
    where = bench.copy_positions(pieces)
    assert [pieces[i] for i in where["operators"]] == [
        " *",
        " -",
    ]  # the plan's, not the question's or the code's
    assert "".join(pieces[i] for i in where["operand digits"]) == "974291263"
    assert "".join(pieces[i] for i in where["printed value, reflection"]) == "283171"
    assert "".join(pieces[i] for i in where["printed value, answer"]) == "283171"
    assert min(where["operators"]) > text.index("Expression") and max(
        where["printed value, answer"]
    ) > text.index("boxed")


def test_report_counts_a_copy_not_learned_as_the_run_length() -> None:
    bench = load_bench()

    def run(operators_at: int | None) -> dict[str, object]:
        curve = [
            {"step": s, "operators": 1.0 if operators_at is not None and s >= operators_at else 0.33}
            for s in (100, 200, 300, 400)
        ]
        return {"curve": curve, "steps_per_min": 500.0}

    runs = {"tied": {0: run(None), 1: run(300)}, "untied": {0: run(100), 1: run(200)}}
    assert bench.learned_at(runs["tied"][1]["curve"], "operators", 0.95) == 300
    assert bench.learned_at(runs["tied"][0]["curve"], "operators", 0.95) is None
    text = bench.report(runs, steps=400, target=0.95)
    assert "seed 0: >400" in text and "seed 1: 300" in text
    assert "operators" in text and "0.43" in text  # (100 + 200) / 2 / ((400 + 300) / 2)


def test_quick_run_trains_both_variants(
    storage_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    out, png = tmp_path / "copy.json", tmp_path / "copy.png"
    record = run_bench(
        "bench_copy_learning", ["--quick", "--seeds", "0", "--json", str(out), "--plot", str(png)]
    )
    runs = json.loads(out.read_text())["figures"]["runs"]
    assert set(record["ratios"]) == {f"untied / tied steps to learn {c}" for c in load_bench().COPIES}
    assert set(runs) == {"tied", "untied"}
    for variant in runs.values():
        curve = variant["0"]["curve"]
        assert [p["step"] for p in curve] == [2, 4]
        assert {"operators", "operand digits"} <= set(curve[-1]) and all(
            0 <= v <= 1 for v in curve[-1].values() if v != 4
        )
    assert png.stat().st_size > 0
