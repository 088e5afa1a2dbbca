"""``infra/run_plan.py``: a profile's plan run in-process without Prefect (the lent GPU image lacks it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_plan", ROOT / "infra" / "run_plan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_up_to_a_step_then_resumes_on_what_it_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COA_STORAGE_ROOT", str(tmp_path / "store"))
    runner = load_runner()
    args = [
        "-c",
        str(ROOT / "configs/demo.yaml"),
        "synthetic.train={arithmetic: 20, multihop: 10, programming: 10}",
    ]
    report = tmp_path / "run.json"
    assert runner.main([*args, "--until", "synthetic", "--json", str(report)]) == 0
    first = {row["stage"]: row for row in json.loads(report.read_text())["stages"]}
    assert first["synthetic"]["status"] == "built" and first["synthetic"]["rows"] == 40
    assert first["collect"]["status"] == "not run"  # --until stopped there
    assert runner.main([*args, "--until", "synthetic", "--json", str(report)]) == 0
    again = {row["stage"]: row for row in json.loads(report.read_text())["stages"]}
    assert again["synthetic"]["status"] == "reused"
    assert again["synthetic"]["artifact"] == first["synthetic"]["artifact"]
    assert "--- synthetic: reused" in capsys.readouterr().out


def test_an_unknown_step_is_refused_with_the_plans_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COA_STORAGE_ROOT", str(tmp_path / "store"))
    with pytest.raises(SystemExit) as exit_:
        load_runner().main(["-c", str(ROOT / "configs/demo.yaml"), "--until", "train"])
    assert exit_.value.code == 2
    assert "--until 'train' is no step of this plan: synthetic, collect" in capsys.readouterr().err
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.parquet"))


@pytest.mark.sandbox
def test_each_steps_headline_is_said_as_the_step_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run cut short (the GPU's device time) still shows what its finished steps measured."""
    monkeypatch.setenv("COA_STORAGE_ROOT", str(tmp_path / "store"))
    tiny = "synthetic.train={arithmetic: 12, multihop: 4, programming: 4}"
    assert load_runner().main(["-c", str(ROOT / "configs/demo.yaml"), tiny, "--until", "curate"]) == 0
    out = capsys.readouterr().out
    said = out[out.index("--- curate: built") :].splitlines()[1:]
    assert said and said[0].startswith("    ") and said[0].strip()  # the curation's headline, indented


def test_a_store_without_the_plans_first_steps_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store carried to the GPU for other code or config is said at once, not rebuilt on device time."""
    monkeypatch.setenv("COA_STORAGE_ROOT", str(tmp_path / "store"))
    runner = load_runner()
    tiny = "synthetic.train={arithmetic: 20, multihop: 10, programming: 10}"
    config = ["-c", str(ROOT / "configs/demo.yaml"), tiny]
    assert runner.main([*config, "--until", "synthetic"]) == 0
    built = sorted(p.parent.name for p in (tmp_path / "store").rglob("_COMMITTED"))
    capsys.readouterr()

    other = [*config, "synthetic.seed=7", "--until", "collect", "--expect-reused", "synthetic"]
    assert runner.main(other) == 4
    err = capsys.readouterr().err
    assert "error: synthetic would be built, not reused" in err and "infra/gpu-prepare.sh" in err
    assert sorted(p.parent.name for p in (tmp_path / "store").rglob("_COMMITTED")) == built  # nothing ran

    assert runner.main([*config, "--until", "synthetic", "--expect-reused", "synthetic"]) == 0
    assert "--- synthetic: reused" in capsys.readouterr().out
