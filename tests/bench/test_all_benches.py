"""Every ``bench/bench_*.py`` runs through the harness and accepts ``--quick``; ``make bench``'s set is whole.

Each script imports ``bench/harness.py``, hands its ``run`` to the harness's ``main`` under
``__main__``, and its arguments parse with ``--quick`` alone (parsed here, not run: the quick set
takes minutes). Every bench is either in the quick set (``bench/quick.py``'s ``QUICK``) or listed
with what it needs (``NEEDS``). The runner itself runs one quick bench end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.scripts import REPO, load_script

BENCHES = sorted(p.stem for p in (REPO / "bench").glob("bench_*.py"))
INPUTS = {
    "bench_sft_gpu": ["--data", "sft-data", "--out", "out"],
    "bench_rl_gpu": ["--prompts", "prompts", "--sft-data", "sft-data", "--out", "out"],
}
"""The GPU benches read what ``infra/gpu-prepare.sh`` built on the CPU: their inputs are required."""


@pytest.mark.parametrize("name", BENCHES)
def test_each_bench_runs_through_the_harness_and_accepts_quick(name: str) -> None:
    source = (REPO / "bench" / f"{name}.py").read_text(encoding="utf-8")
    assert "from harness import" in source, f"{name} does not import bench/harness.py"
    main_block = source.split('if __name__ == "__main__":', 1)[1]
    assert "main(run, __doc__" in main_block, f"{name}: its entry point is not the harness's main"
    script, harness = load_script(name), load_script("harness")
    args = harness.parser(script.__doc__, getattr(script, "arguments", None)).parse_args(
        ["--quick", *INPUTS.get(name, [])]
    )
    assert args.quick is True and args.json is None


def test_every_bench_is_in_the_quick_set_or_says_what_it_needs() -> None:
    quick = load_script("quick")
    assert not set(quick.QUICK) & set(quick.NEEDS)
    assert set(quick.QUICK) | set(quick.NEEDS) == set(BENCHES)
    assert "quick.py" in (REPO / "Makefile").read_text(encoding="utf-8")


def test_the_quick_runner_runs_a_bench_and_keeps_its_record(tmp_path: Path) -> None:
    out, records = tmp_path / "quick.json", tmp_path / "records"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "quick.py", "--only", "bench_contract", "--out-dir", str(records)]
    done = subprocess.run([*command, "--json", str(out)], cwd=REPO / "bench", env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(out.read_text())
    assert record["bench"] == "quick" and record["figures"]["failed"] == []
    assert record["figures"]["bench_contract"]["status"] == 0
    assert record["figures"]["bench_contract"]["ratios"]["checked / raw"] > 0
    assert json.loads((records / "bench_contract.json").read_text())["machine"]["cores"] >= 1
