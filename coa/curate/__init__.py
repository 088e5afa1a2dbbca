"""Curation of raw teacher trajectories: filters, dedup, decontamination, a data-quality gate.

The core is :func:`coa.curate.core.curate` (pure: batches in, callbacks out), the step on storage
:mod:`coa.curate.step`; see :mod:`coa.curate.core` for the flow
and the other modules for each concept. Nothing here imports Prefect.
"""

from typing import TYPE_CHECKING, Any

from coa.curate.config import CurateConfig, DecontamConfig, DedupConfig, FilterConfig, GateConfig

if TYPE_CHECKING:
    from coa.curate.core import CurateGateError, CurateResult, curate
    from coa.curate.decontam import BenchmarkIndex, load_benchmarks
    from coa.curate.dedup import Deduplicator
    from coa.curate.expectations import Gate, GateResult
    from coa.curate.filters import CoaCheck, Rejection, Score
    from coa.curate.report import headline_markdown, render_report

__all__ = [
    "BenchmarkIndex",
    "CoaCheck",
    "CurateConfig",
    "CurateGateError",
    "CurateResult",
    "DecontamConfig",
    "DedupConfig",
    "Deduplicator",
    "FilterConfig",
    "Gate",
    "GateConfig",
    "GateResult",
    "Rejection",
    "Score",
    "curate",
    "headline_markdown",
    "load_benchmarks",
    "render_report",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in ("CurateGateError", "CurateResult", "curate"):
        from coa.curate import core

        return getattr(core, name)
    if name in ("BenchmarkIndex", "load_benchmarks"):
        from coa.curate import decontam

        return getattr(decontam, name)
    if name in ("Deduplicator",):
        from coa.curate import dedup

        return getattr(dedup, name)
    if name in ("Gate", "GateResult"):
        from coa.curate import expectations

        return getattr(expectations, name)
    if name in ("CoaCheck", "Rejection", "Score"):
        from coa.curate import filters

        return getattr(filters, name)
    if name in ("headline_markdown", "render_report"):
        from coa.curate import report

        return getattr(report, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
