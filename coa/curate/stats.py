"""Streaming statistics of a ``curate`` run and the JSON summary kept for the next run's drift.

Per batch, :class:`StatsBuilder` writes the narrow per-run numbers of every input run (status,
counts, tokens, correctness, kept or the quarantine reason: a few dozen bytes per run) to a
temporary file (:class:`coa.curate.spill.FrameSpill`; queried at the end, lazily) and folds the
steps into fixed-size aggregates (role, agent and tool counts, tool errors, an observation length
histogram), separately for all input runs and for the kept ones. :meth:`StatsBuilder.stats`
turns them into a :class:`CurationStats` (``summary.json`` of the artifact, ``curate.summary.v1``);
its histograms use fixed bin edges (:data:`EDGES`), so the histograms of two runs always line up
for the drift plots. The report and the model card read its fields, never string keys.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from coa.curate.frames import run_frame, step_frame
from coa.curate.spill import FrameSpill
from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

SUMMARY_SCHEMA = "curate.summary.v1"

EDGES: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16) + tuple(
    int(m * 2**k) for k in range(4, 48) for m in (1.5, 2)
)
"""Histogram bin edges (left-closed): 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, ... (≈2^48)."""

HIST_METRICS = ("n_steps", "n_tool_calls", "tokens")


class _Record(BaseModel):
    """A part of ``summary.json``: frozen; an older file reads back (a key it lacks takes its default,
    a key this version no longer reads is ignored); written with the fields that were set."""

    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
        ser_json_inf_nan="constants",
    )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The record a stored ``summary.json`` (or a part of it) holds."""
        return cls.model_validate(dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``summary.json`` stores: the fields that were set, under their stored names."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Histogram(_Record):
    """Counts in the fixed :data:`EDGES` bins (trailing empty bins dropped)."""

    edges: tuple[int, ...] = Field(default=(), description="Bin edges, one more than the counts.")
    counts: tuple[int, ...] = Field(default=(), description="Values per bin (left-closed).")

    @property
    def total(self) -> int:
        return sum(self.counts)


class ToolStats(_Record):
    """Calls of one tool and how many returned an error."""

    calls: int = Field(description="Tool calls.")
    errors: int = Field(description="Calls that returned an error.")
    error_rate: float | None = Field(description="errors / calls; None without calls.")


class StepStats(_Record):
    """Step statistics of one population (all input runs, or the kept ones)."""

    steps: int = Field(default=0, description="Steps.")
    roles: dict[str, int] = Field(default_factory=dict, description="Steps per role.")
    role_by_agent: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="Agent -> role -> steps."
    )
    tools: dict[str, ToolStats] = Field(default_factory=dict, description="Tool -> its calls and errors.")
    observations: int = Field(default=0, description="Steps with an observation.")
    observation_chars: int = Field(default=0, description="Characters over every observation.")
    observation_hist: Histogram = Field(default_factory=Histogram, description="Observation lengths.")


class Metrics(_Record):
    """The run's headline metrics (the drift table compares them with the previous run's)."""

    rows_in: int | None = Field(default=None, description="Runs read.")
    rows_kept: int | None = Field(default=None, description="Runs kept.")
    kept_rate: float | None = Field(default=None, description="rows_kept / rows_in.")
    kept_tasks: int | None = Field(default=None, description="Tasks with a kept run.")
    correct_rate_input: float | None = Field(default=None, description="Correct share of the scored input.")
    correct_rate_kept: float | None = Field(
        default=None, description="Correct share of the scored kept runs."
    )
    scored_rate_input: float | None = Field(default=None, description="Share of the input that was scored.")
    clean_end_rate_input: float | None = Field(default=None, description="Share of the input that completed.")
    mean_steps: float | None = Field(default=None, description="Mean steps of a kept run.")
    median_steps: float | None = Field(default=None, description="Median steps of a kept run.")
    mean_tool_calls: float | None = Field(default=None, description="Mean tool calls of a kept run.")
    mean_tokens: float | None = Field(default=None, description="Mean tokens of a kept run.")
    median_tokens: float | None = Field(default=None, description="Median tokens of a kept run.")
    tool_error_rate_input: float | None = Field(default=None, description="Tool error rate of the input.")
    tool_error_rate_kept: float | None = Field(default=None, description="Tool error rate of the kept runs.")
    mean_observation_chars: float | None = Field(default=None, description="Mean kept observation length.")
    contaminated_rate: float | None = Field(default=None, description="Share quarantined as contaminated.")
    duplicate_rate: float | None = Field(default=None, description="Share quarantined as duplicates.")


class FamilyCounts(_Record):
    """Runs of one family read and kept."""

    read: int = Field(validation_alias="in", serialization_alias="in", description="Runs read.")
    kept: int = Field(description="Runs kept.")


class GateCheck(_Record):
    """One great-expectations check of the gate (:mod:`coa.curate.expectations`)."""

    suite: str = Field(description="The suite (runs or steps).")
    check: str = Field(description="The check's name.")
    expectation: str = Field(description="The expectation type.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")
    success: bool = Field(description="Whether it held.")
    observed_value: Any = Field(default=None, description="What was observed.")
    element_count: int | None = Field(default=None, description="Rows it looked at.")
    unexpected_count: int | None = Field(default=None, description="Rows that broke it.")
    partial_unexpected: list[Any] = Field(default_factory=list, description="Up to 20 of them.")
    exception: str | None = Field(default=None, description="The error, if the check raised.")
    chunks: int | None = Field(default=None, description="Step chunks merged (the steps suite only).")


class GateRecord(_Record):
    """The data-quality gate's outcome."""

    success: bool = Field(description="Whether every gating expectation held.")
    checks: tuple[GateCheck, ...] = Field(default=(), description="Each check, in order.")
    data_docs: str | None = Field(default=None, description="The Data Docs index, if built.")


class DriftRow(_Record):
    """One metric against the previous run's (:func:`coa.curate.report.drift_rows`)."""

    metric: str = Field(description="The metric (a field of :class:`Metrics`).")
    previous: int | float | None = Field(description="The previous run's value.")
    current: int | float | None = Field(description="This run's value.")
    delta: int | float | None = Field(description="current - previous.")
    relative: float | None = Field(description="delta / |previous|.")
    flag: bool = Field(description="Whether |relative| is past the warning threshold.")


class CurationStats(_Record):
    """``summary.json`` of a curate artifact (``curate.summary.v1``): the run's statistics, the
    next run's drift baseline."""

    schema_id: str = Field(
        default=SUMMARY_SCHEMA,
        validation_alias="schema",
        serialization_alias="schema",
        description="Its version.",
    )
    created_at: str = Field(default="", description="When it was computed (ISO 8601, UTC).")
    rows_in: int = Field(default=0, description="Runs read.")
    rows_kept: int = Field(default=0, description="Runs kept.")
    rows_quarantined: int = Field(default=0, description="Runs set aside.")
    kept_tasks: int = Field(default=0, description="Tasks with a kept run.")
    reasons: dict[str, int] = Field(
        default_factory=dict, description="Quarantine reason -> runs, most first."
    )
    metrics: Metrics = Field(default_factory=Metrics, description="The headline metrics.")
    histograms: dict[str, Histogram] = Field(
        default_factory=dict, description="Kept runs: metric -> histogram."
    )
    histograms_input: dict[str, Histogram] = Field(
        default_factory=dict, description="The same, every input run."
    )
    steps_kept: StepStats = Field(default_factory=StepStats, description="Steps of the kept runs.")
    steps_input: StepStats = Field(default_factory=StepStats, description="Steps of every input run.")
    families: dict[str, FamilyCounts] = Field(default_factory=dict, description="Family -> runs read, kept.")
    statuses: dict[str, int] = Field(default_factory=dict, description="Input runs per status.")
    gate: GateRecord | None = Field(default=None, description="The gate's outcome; None: it did not run.")
    drift: tuple[DriftRow, ...] = Field(default=(), description="Metrics against the previous run's.")
    config: dict[str, Any] | None = Field(default=None, description="The curate config of the run.")


def run_schema() -> dict[str, pl.DataType | type[pl.DataType]]:
    """The per-run numbers :meth:`StatsBuilder.runs` returns (a function: polars is imported where
    curation runs, :mod:`coa.lazy`)."""
    return {
        "run_id": pl.String,
        "family": pl.Categorical,
        "status": pl.Categorical,
        "n_steps": pl.Int32,
        "n_tool_calls": pl.Int32,
        "tokens": pl.Int64,
        "answer_chars": pl.Int32,
        "correct": pl.Boolean,
        "n_tool_errors": pl.Int32,
        "max_observation_chars": pl.Int32,
        "reason": pl.Categorical,
        "kept": pl.Boolean,
    }


def histogram(values: Sequence[int] | np.ndarray) -> Histogram:
    """Counts of ``values`` in the fixed :data:`EDGES` bins, trailing empty bins dropped."""
    counts = _bin_counts(np.asarray(values, dtype=np.int64))
    return _trim(counts)


def _bin_counts(values: np.ndarray) -> np.ndarray:
    edges = np.asarray(EDGES, dtype=np.int64)
    idx = np.searchsorted(edges, np.clip(values, 0, None), side="right") - 1
    return np.bincount(idx, minlength=len(EDGES)).astype(np.int64)


def _trim(counts: np.ndarray) -> Histogram:
    nz = np.nonzero(counts)[0]
    k = int(nz[-1]) + 1 if len(nz) else 0
    return Histogram(edges=EDGES[: k + 1], counts=tuple(int(c) for c in counts[:k]))


class _StepAggregate:
    """Fixed-size step statistics of one population (all input runs, or the kept runs)."""

    def __init__(self) -> None:
        self.steps = 0
        self.roles: Counter[str] = Counter()
        self.role_by_agent: dict[str, Counter[str]] = {}
        self.tool_calls: Counter[str] = Counter()
        self.tool_errors: Counter[str] = Counter()
        self.observations = 0
        self.observation_chars = 0
        self.observation_hist = np.zeros(len(EDGES), dtype=np.int64)

    def add(self, steps: pl.DataFrame) -> None:
        if steps.is_empty():
            return
        self.steps += steps.height
        for agent, role, n in steps.group_by("agent", "role").len().iter_rows():
            self.roles[role] += n
            self.role_by_agent.setdefault(agent, Counter())[role] += n
        calls = steps.filter(pl.col("role") == "tool_call")
        for tool, n, errors in (
            calls.group_by("tool_name")
            .agg(pl.len(), pl.col("error").is_not_null().sum().alias("errors"))
            .iter_rows()
        ):
            name = tool if tool is not None else "<none>"
            self.tool_calls[name] += n
            self.tool_errors[name] += int(errors)
        lengths = steps.filter(pl.col("observation").is_not_null()).select(
            pl.col("observation").str.len_chars()
        )
        if lengths.height:
            arr = lengths.to_series().to_numpy()
            self.observations += len(arr)
            self.observation_chars += int(arr.sum())
            self.observation_hist += _bin_counts(arr.astype(np.int64))

    def stats(self) -> StepStats:
        tools = {
            t: ToolStats(
                calls=self.tool_calls[t],
                errors=self.tool_errors[t],
                error_rate=self.tool_errors[t] / self.tool_calls[t] if self.tool_calls[t] else None,
            )
            for t in sorted(self.tool_calls)
        }
        return StepStats(
            steps=self.steps,
            roles=dict(sorted(self.roles.items())),
            role_by_agent={a: dict(sorted(c.items())) for a, c in sorted(self.role_by_agent.items())},
            tools=tools,
            observations=self.observations,
            observation_chars=self.observation_chars,
            observation_hist=_trim(self.observation_hist),
        )


class StatsBuilder:
    """Accumulates per-run numbers and step aggregates batch by batch."""

    STEP_FIELDS = ("agent", "role", "tool_name", "error", "observation")

    def __init__(self) -> None:
        self._runs = FrameSpill(prefix="coa-curate-runs-")
        self._lazy: pl.LazyFrame | None = None
        self.input_steps = _StepAggregate()
        self.kept_steps = _StepAggregate()

    def add_batch(
        self,
        table: pa.Table,
        reasons: Sequence[str | None],
        steps: pl.DataFrame | None = None,
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Fold one scored batch in; ``reasons[i]`` is None for a kept run.

        ``steps`` is the batch's step frame with at least :attr:`STEP_FIELDS` (computed here when
        not given). Returns the batch's run frame and the step frame of its kept runs.
        """
        runs = (
            run_frame(table)
            .with_columns(
                reason=pl.Series("reason", list(reasons), dtype=pl.String),
            )
            .with_columns(kept=pl.col("reason").is_null())
        )
        if steps is None:
            steps = step_frame(table, self.STEP_FIELDS)
        self.input_steps.add(steps)
        kept_rows = runs.filter(pl.col("kept")).get_column("row")
        kept_steps = steps.filter(pl.col("row").is_in(kept_rows.implode()))
        self.kept_steps.add(kept_steps)
        self._runs.append(
            runs.select(
                "run_id",
                pl.col("family").cast(pl.String),
                pl.col("status").cast(pl.String),
                pl.col("n_steps").cast(pl.Int32),
                pl.col("n_tool_calls").cast(pl.Int32),
                "tokens",
                pl.col("answer_chars").cast(pl.Int32),
                "correct",
                pl.col("n_tool_errors").cast(pl.Int32),
                pl.col("max_observation_chars").cast(pl.Int32),
                pl.col("reason").cast(pl.String),
                "kept",
            )
        )
        return runs, kept_steps

    def runs(self) -> pl.LazyFrame:
        """Every input run's numbers (``kept``, ``reason`` included), lazily over the spill file:
        each query reads only what it needs from disk (no :meth:`add_batch` after the first call;
        the file stays until :meth:`close`)."""
        if self._lazy is None:
            scan = self._runs.scan()
            if scan is None:
                self._lazy = pl.DataFrame(schema=run_schema()).lazy()
            else:
                categorical = [c for c, t in run_schema().items() if t == pl.Categorical]
                self._lazy = scan.with_columns(pl.col(categorical).cast(pl.Categorical))
        return self._lazy

    def close(self) -> None:
        """Remove the spill file (after the gate and :meth:`summary`)."""
        self._runs.close()

    def approx_bytes(self) -> int:
        """Size of the per-run numbers held in memory: none (they wait on disk, see :meth:`runs`)."""
        return 0

    @property
    def disk_bytes(self) -> int:
        return self._runs.disk_bytes

    def stats(self, kept_tasks: int, gate: GateRecord | None) -> CurationStats:
        """The statistics of the run (also the next run's drift baseline)."""
        runs = self.runs().drop("run_id").collect()  # numbers only: no string per run is read
        kept_mask = runs.get_column("kept")
        n_in, n_kept = runs.height, int(kept_mask.sum())
        reasons = Counter(
            {str(r): int(n) for r, n in runs.group_by("reason").len().drop_nulls("reason").iter_rows()}
        )
        reason_counts = dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        # one pass of aggregations over columns (no filtered copy of the frame per metric)
        kept_col = pl.col("kept")
        agg = runs.select(
            correct_in=pl.col("correct").cast(pl.Float64).mean(),
            correct_kept=pl.col("correct").filter(kept_col).cast(pl.Float64).mean(),
            scored=pl.col("correct").is_not_null().sum(),
            completed=(pl.col("status") == "completed").sum(),
            mean_steps=pl.col("n_steps").filter(kept_col).cast(pl.Float64).mean(),
            median_steps=pl.col("n_steps").filter(kept_col).cast(pl.Float64).median(),
            mean_tool_calls=pl.col("n_tool_calls").filter(kept_col).cast(pl.Float64).mean(),
            mean_tokens=pl.col("tokens").filter(kept_col).cast(pl.Float64).mean(),
            median_tokens=pl.col("tokens").filter(kept_col).cast(pl.Float64).median(),
        ).row(0, named=True)

        def value(name: str) -> float | None:
            v = agg[name]
            return None if v is None else float(v)

        def share(prefixes: tuple[str, ...]) -> float | None:
            if not n_in:
                return None
            return sum(v for k, v in reasons.items() if k.startswith(prefixes)) / n_in

        ks = self.kept_steps.stats()
        ins = self.input_steps.stats()

        def error_rate(stats: StepStats) -> float | None:
            calls = sum(t.calls for t in stats.tools.values())
            return sum(t.errors for t in stats.tools.values()) / calls if calls else None

        metrics = Metrics(
            rows_in=n_in,
            rows_kept=n_kept,
            kept_rate=n_kept / n_in if n_in else None,
            kept_tasks=kept_tasks,
            correct_rate_input=value("correct_in"),
            correct_rate_kept=value("correct_kept"),
            scored_rate_input=int(agg["scored"]) / n_in if n_in else None,
            clean_end_rate_input=int(agg["completed"]) / n_in if n_in else None,
            mean_steps=value("mean_steps"),
            median_steps=value("median_steps"),
            mean_tool_calls=value("mean_tool_calls"),
            mean_tokens=value("mean_tokens"),
            median_tokens=value("median_tokens"),
            tool_error_rate_input=error_rate(ins),
            tool_error_rate_kept=error_rate(ks),
            mean_observation_chars=ks.observation_chars / ks.observations if ks.observations else None,
            contaminated_rate=share(("contaminated_",)),
            duplicate_rate=share(("exact_duplicate", "near_duplicate", "task_cap")),
        )
        families = {
            str(fam): FamilyCounts(read=int(n), kept=int(k))
            for fam, n, k in sorted(runs.group_by("family").agg(pl.len(), kept_col.sum()).iter_rows())
        }
        statuses = {str(s): int(n) for s, n in sorted(runs.group_by("status").len().iter_rows())}
        return CurationStats(
            schema_id=SUMMARY_SCHEMA,
            created_at=dt.datetime.now(dt.UTC).isoformat(),
            rows_in=n_in,
            rows_kept=n_kept,
            rows_quarantined=n_in - n_kept,
            kept_tasks=kept_tasks,
            reasons=reason_counts,
            metrics=metrics,
            histograms={m: histogram(runs.get_column(m).filter(kept_mask).to_numpy()) for m in HIST_METRICS}
            | {"observation_chars": ks.observation_hist},
            histograms_input={m: histogram(runs.get_column(m).to_numpy()) for m in HIST_METRICS}
            | {"observation_chars": ins.observation_hist},
            steps_kept=ks,
            steps_input=ins,
            families=families,
            statuses=statuses,
            gate=gate,
        )
