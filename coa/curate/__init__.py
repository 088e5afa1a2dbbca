"""Curation of raw teacher trajectories: filters, dedup, decontamination, a data-quality gate.

The core is :func:`coa.curate.core.curate` (pure: batches in, callbacks out), the step on storage
:mod:`coa.curate.step`; see :mod:`coa.curate.core` for the flow
and the other modules for each concept. Nothing here imports Prefect.
"""

from coa.curate.config import CurateConfig, DecontamConfig, DedupConfig, FilterConfig, GateConfig
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
