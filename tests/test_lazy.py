"""``coa.lazy``: polars is imported where curation or conversion runs, not by every entry layer.

A GPU machine that only trains and evaluates on a store curated elsewhere has no polars (it does not
fit beside the wheels the GPU check carries): the plan, the stage table and every step that runs no
curation must import without it, and curation there must say what is missing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coa.lazy import MissingDependency, available, lazy_module


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_plan_imports_without_importing_polars() -> None:
    proc = run(
        "import sys\nimport coa.plan, coa.plan.stages, coa.curate.step, coa.convert.step\n"
        "print('polars' in sys.modules)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_without_polars_the_plan_imports_and_curation_says_what_is_missing() -> None:
    proc = run(
        "import sys\nsys.modules['polars'] = None  # not installed\n"
        "import coa.plan.stages\nfrom coa.curate import task_stats\n"
        "task_stats.empty_schema()\n"
    )
    assert proc.returncode == 1
    assert "MissingDependency: polars is not installed here and curation needs it: pip install polars" in (
        proc.stderr
    )


def test_a_lazy_module_is_the_module_once_read() -> None:
    import polars

    pl = lazy_module("polars", "curation")
    assert pl.DataFrame is polars.DataFrame and available(pl)
    assert issubclass(MissingDependency, ImportError)  # callers that catch ImportError still do
    with pytest.raises(ValueError, match="no importer"):
        lazy_module("numpy", "anything")
