"""Configuration of the promotion gate (``promotion.gate``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from coa.config import StrictModel
from coa.evaluate.names import ALL, METRICS


class GateConfig(StrictModel):
    """Thresholds of the promotion gate."""

    margin: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Largest tolerated regression per benchmark, at the lower bound of the paired interval.",
    )
    metric: str = Field(
        default="correct", description="Metric checked for regressions (correct|score|format_valid)."
    )
    primary_benchmark: str = Field(
        default=ALL, description="Benchmark that must gain ('all' = every evaluated pair together)."
    )
    primary_metric: str = Field(
        default="correct", description="Metric that must gain (correct|score|format_valid)."
    )
    min_gain: float = Field(
        default=0.0,
        ge=0.0,
        description="Smallest point gain on the primary metric; the gain must also be > 0.",
    )
    significant_gain: bool = Field(
        default=False, description="Also require the primary gain's interval lower bound to be above 0."
    )
    bootstrap_samples: int = Field(
        default=2000, ge=100, le=200_000, description="Paired bootstrap resamples."
    )
    confidence: float = Field(
        default=0.95, gt=0.5, lt=1.0, description="Two-sided confidence of the interval."
    )
    seed: int = Field(default=0, description="Seed of the bootstrap (verdicts are reproducible).")
    require_curation: bool = Field(
        default=True,
        description="Refuse a candidate whose lineage holds no curation step (no data-quality gate).",
    )
    refuse_alarm: bool = Field(
        default=True,
        description="Refuse a candidate whose lineage holds an RL run that raised the reward-hacking alarm "
        "(training reward rising while the held-out score fell).",
    )

    def model_post_init(self, _context: Any) -> None:
        for value in (self.metric, self.primary_metric):
            if value not in METRICS:
                raise ValueError(f"gate metric must be one of {METRICS}, got {value!r}")
