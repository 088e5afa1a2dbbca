"""The CoA check runs once per run: curate keeps its rendering, convert reuses it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

import schemas
from coa.convert import core
from coa.convert.config import ConvertConfig
from coa.curate.core import curate
from coa.format.from_run import coa_check, to_coa
from tests.curate.rows import Sink, no_gate, score


def curated_rows(runs: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """``runs`` through :func:`coa.curate.core.curate` with the real CoA check: the kept rows."""
    sink = Sink()
    table = schemas.TRAJECTORY.from_rows(copy.deepcopy(runs))
    curate([table], no_gate(), score, coa_check, {}, None, sink.curated.append, sink.quarantine.append,
           str(tmp_path), source="test")  # fmt: skip
    return sink.kept()


def test_curate_keeps_the_checks_rendering_in_each_kept_run(
    teacher_runs: list[dict[str, Any]], tmp_path: Path
) -> None:
    kept = curated_rows(teacher_runs, tmp_path)
    assert kept
    for row in kept:
        conversion = to_coa(row)
        assert conversion.trajectory is not None
        assert row["coa_variant"] == conversion.variant
        assert row["coa_text"] == core.render(conversion.trajectory)


def test_convert_reuses_the_rendering_and_converts_again_only_for_another_variant(
    teacher_runs: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = curated_rows(teacher_runs, tmp_path)
    fresh = [{**r, "coa_variant": None, "coa_text": None} for r in kept]  # as curated before the column
    config = ConvertConfig(tokenizer="approx")
    expected, _ = core.sft_examples(fresh, config, "x")
    calls: list[str] = []

    def counted(run: dict[str, Any], variant: str | None = None) -> Any:
        calls.append(run["run_id"])
        return to_coa(run, variant)

    monkeypatch.setattr(core, "to_coa", counted)
    reused, rejected = core.sft_examples(kept, config, "x")
    assert calls == [] and not rejected and reused == expected  # not one run converted a second time
    family = kept[0]["family"]
    other = "web" if kept[0]["coa_variant"] != "web" else "code_math"
    core.sft_examples(kept, ConvertConfig(tokenizer="approx", variants={family: other}), "x")
    assert set(calls) == {r["run_id"] for r in kept if r["family"] == family}
