"""The publishers' grader packages: pinned in pyproject.toml, installed at those versions, and
importable both here and inside the sandbox (which runs LiveCodeBench's evaluator)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from coa.errors import InfraError
from coa.scoring.benchmarks import SCORERS
from coa.scoring.benchmarks.publishers import (
    PINNED,
    GraderUnavailable,
    grader_import,
    package_label,
    package_version,
)
from coa.tools.sandbox import run_python
from tests.tools.support import requires_sandbox

REPO = Path(__file__).resolve().parents[2]


def test_the_grader_packages_are_pinned_and_installed_at_the_pins() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    no_deps = dict(spec.split("==") for spec in pyproject["tool"]["coa"]["graders"]["no-deps"])
    assert {k: v for k, v in no_deps.items() if k in PINNED} == {
        k: v for k, v in PINNED.items() if k != "math-verify"
    }
    assert f"math-verify=={PINNED['math-verify']}" in pyproject["project"]["dependencies"]
    for dist, version in {**no_deps, **PINNED}.items():
        assert package_version(dist) == version, dist
    packaged = {s.info.package for s in SCORERS.values() if s.info.package}
    assert packaged == {package_label(d) for d in PINNED} and all("not installed" not in p for p in packaged)


def test_a_missing_grader_says_how_to_install_it() -> None:
    with (
        pytest.raises(GraderUnavailable, match=r"pip install --no-deps nvidia-livecodebench==26\.3") as e,
        grader_import("nvidia-livecodebench"),
    ):
        import livecodebench.no_such_module  # type: ignore[import-not-found]  # noqa: F401
    assert isinstance(e.value, InfraError) and isinstance(e.value, ImportError)
    assert package_version("no-such-distribution-x") is None
    assert package_label("no-such-distribution-x") == "no-such-distribution-x (not installed)"


@pytest.mark.sandbox
@requires_sandbox
def test_the_sandbox_imports_lcbs_evaluator_read_only_and_still_sees_nothing_of_the_host() -> None:
    code = (
        "import os, livecodebench.evaluation.testing_util as t\n"
        "print(t.__file__.startswith('/opt/venv/'))\n"
        "try:\n"
        "    open(os.path.dirname(t.__file__) + '/x.py', 'w')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
        "print(os.path.exists('/work'), os.path.exists('/root'))\n"
    )
    result = run_python(code)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.split()
    assert (
        lines[0] == "True" and lines[1] in ("OSError", "PermissionError") and lines[2:] == ["False", "False"]
    )
