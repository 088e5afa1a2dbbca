"""The publishers' grader packages the benchmark scorers run, and the versions installed.

A number is comparable with a leaderboard only when it was graded by the leaderboard's own code, so
the scorers of :mod:`coa.scoring.benchmarks` call it from the package its publisher ships rather
than a rewrite of it, and every result names the package and version (``ScorerInfo.package``):

=========================  ====================================================================
package (pinned)           what grades with it
=========================  ====================================================================
``nvidia-simple-evals``    BrowseComp, SimpleQA (and HLE's judge template): ``grade_sample`` of
                           ``simple_evals.evals.browsecomp_eval`` / ``simpleqa_eval``
``nvidia-livecodebench``   LiveCodeBench: ``check_correctness`` / ``run_test`` of
                           ``livecodebench.evaluation``, run inside the project's sandbox
``math-verify``            AIME, AMC, MATH-500, OlympiadBench: ``parse`` / ``verify`` as AFM's
                           reward calls them
=========================  ====================================================================

The first two are installed without their declared dependencies (``pyproject.toml``
``[tool.coa.graders]`` says why); :func:`grader_import` wraps the import of the narrowest module that holds
the grader and turns a missing package into an :class:`~coa.errors.InfraError` saying how to install it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from importlib import metadata

from coa.errors import InfraError

SIMPLE_EVALS = "nvidia-simple-evals"
LIVECODEBENCH = "nvidia-livecodebench"
MATH_VERIFY = "math-verify"

PINNED = {SIMPLE_EVALS: "26.3", LIVECODEBENCH: "26.3", MATH_VERIFY: "0.9.0"}
"""The versions ``pyproject.toml`` pins (checked against the installed ones by the tests)."""


class GraderUnavailable(InfraError, ImportError):
    """A benchmark's grader package is not installed (or cannot be imported)."""


@functools.cache
def package_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def package_label(dist: str) -> str:
    """``"<dist> <version>"`` for results and reports (``"<dist> (not installed)"`` without it)."""
    version = package_version(dist)
    return f"{dist} {version}" if version else f"{dist} (not installed)"


@contextlib.contextmanager
def grader_import(dist: str) -> Iterator[None]:
    """Around the import of a grader of package ``dist``: a failed import raises
    :class:`GraderUnavailable` saying how to install the package."""
    try:
        yield
    except ImportError as e:
        pin = PINNED.get(dist, "")
        raise GraderUnavailable(
            f"a grader of {dist} cannot be imported ({e}); install it with "
            f"`pip install --no-deps {dist}=={pin}` (`make test` does: pyproject.toml [tool.coa.graders])"
        ) from e


__all__ = [
    "LIVECODEBENCH",
    "MATH_VERIFY",
    "PINNED",
    "SIMPLE_EVALS",
    "GraderUnavailable",
    "grader_import",
    "package_label",
    "package_version",
]
