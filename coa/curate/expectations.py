"""The great-expectations gate of the ``curate`` stage, with Data Docs HTML.

Three suites run on pandas frames in an ephemeral great-expectations context:

* ``curate_runs`` on the curated runs (one row per kept run): run ids unique and present, family
  and status in their sets, steps, tool calls, tokens and final-answer length in the configured
  ranges. The runs are validated in parts of about ``run_chunk_rows``, split by a hash of the run
  id (so a repeated id always lands in one part, and uniqueness per part is uniqueness overall);
* ``curate_totals`` on the ``correct`` column of every curated run: at least ``min_rows`` runs (and
  the correctness floor when ``correctness_scope`` is ``curated``), checks over the whole column;
* ``curate_input`` on every input run: the share of scored runs that are correct is at least
  ``correctness_floor`` (the teacher's accuracy; ``correctness_scope = input``);
* ``curate_steps`` on the curated steps (one row per step): roles in ``STEP_ROLES``, agent and tool
  tags in their sets, no empty turn, observation lengths in range. Steps are validated in chunks of
  ``step_chunk_rows`` as they stream by, so memory stays bounded.

The results of a suite run in parts are merged into one result per check.

Every expectation carries a short name in ``meta["check"]`` (``ids_unique``,
``correctness_floor``, ``roles_in_set``, ...), which is how failures are reported. Data Docs are
written into the given folder (``index.html``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from coa.curate.config import CurateConfig
from coa.lazy import lazy_module
from schemas.task import FAMILIES
from schemas.trajectory import RUN_STATUSES, STEP_ROLES

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

SITE_NAME = "curate_docs"
RUN_COLUMNS = ("run_id", "family", "status", "n_steps", "n_tool_calls", "tokens", "answer_chars", "correct")
STEP_COLUMNS = ("role", "agent", "tool_name", "content_chars", "observation_chars")


@dataclasses.dataclass(frozen=True)
class GateResult:
    """The gate's verdict: success, every check with its merged outcome, and the Data Docs index."""

    success: bool
    checks: list[dict[str, Any]]
    data_docs_index: str | None

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if not c["success"]]


def steps_for_gate(steps: pl.DataFrame) -> pl.DataFrame:
    """The narrow per-step frame the step suite validates, from a step frame with ``role``,
    ``agent``, ``tool_name``, ``text``/``tool_args``/``error`` lengths and ``observation``."""
    return steps.select(
        "role",
        "agent",
        "tool_name",
        content_chars=(
            pl.col("text").str.len_chars().fill_null(0)
            + pl.col("tool_args").str.len_chars().fill_null(0)
            + pl.col("error").str.len_chars().fill_null(0)
        ).cast(pl.Int64),
        observation_chars=pl.col("observation").str.len_chars().fill_null(0).cast(pl.Int64),
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class Gate:
    """Builds the suites once, validates step chunks as they come, the run suites at the end."""

    def __init__(self, config: CurateConfig, docs_dir: str | os.PathLike[str]) -> None:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self._gx = gx
        self.config = config
        self.docs_dir = Path(docs_dir)
        self.docs_dir.mkdir(parents=True, exist_ok=True)
        ctx = gx.get_context(mode="ephemeral")
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        ctx.add_data_docs_site(
            site_name=SITE_NAME,
            site_config={
                "class_name": "SiteBuilder",
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                "store_backend": {
                    "class_name": "TupleFilesystemStoreBackend",
                    "base_directory": str(self.docs_dir),
                },
            },
        )
        self.ctx = ctx
        self._source = ctx.data_sources.add_or_update_pandas(name="curate")
        self._checkpoints = {
            "curate_runs": self._checkpoint("curate_runs", "curated_runs", self._run_expectations()),
            "curate_totals": self._checkpoint("curate_totals", "curated_totals", self._total_expectations()),
            "curate_input": self._checkpoint("curate_input", "input_runs", self._input_expectations()),
            "curate_steps": self._checkpoint("curate_steps", "curated_steps", self._step_expectations()),
        }
        self._buffer: list[pl.DataFrame] = []
        self._buffered = 0
        self._step_results: list[list[dict[str, Any]]] = []

    # -- suites ------------------------------------------------------------------------------
    def _checkpoint(self, suite_name: str, asset: str, expectations: list[Any]) -> Any:
        gx = self._gx
        batch = self._source.add_dataframe_asset(name=asset).add_batch_definition_whole_dataframe("all")
        suite = self.ctx.suites.add_or_update(gx.ExpectationSuite(name=suite_name))
        for e in expectations:
            suite.add_expectation(e)
        vd = self.ctx.validation_definitions.add_or_update(
            gx.ValidationDefinition(name=f"{suite_name}_validation", data=batch, suite=suite)
        )
        return self.ctx.checkpoints.add_or_update(
            gx.Checkpoint(
                name=f"{suite_name}_checkpoint",
                validation_definitions=[vd],
                actions=[],  # results are stored by the run; the site is built once in finish()
                result_format={"result_format": "SUMMARY"},
            )
        )

    def _run_expectations(self) -> list[Any]:
        import great_expectations.expectations as gxe

        g, f = self.config.gate, self.config.filters
        statuses = ("completed",) if f.require_clean_end else RUN_STATUSES
        return [
            gxe.ExpectColumnValuesToNotBeNull(column="run_id", meta={"check": "ids_present"}),
            gxe.ExpectColumnValuesToBeUnique(column="run_id", meta={"check": "ids_unique"}),
            gxe.ExpectColumnValuesToBeInSet(
                column="family", value_set=list(FAMILIES), meta={"check": "families_in_set"}
            ),
            gxe.ExpectColumnValuesToBeInSet(
                column="status", value_set=list(statuses), meta={"check": "statuses_in_set"}
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="n_steps",
                min_value=g.min_steps,
                max_value=g.max_steps,
                meta={"check": "steps_in_range"},
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="n_tool_calls",
                min_value=g.min_tool_calls,
                max_value=g.max_tool_calls,
                meta={"check": "tool_calls_in_range"},
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="tokens",
                min_value=g.min_tokens,
                max_value=g.max_tokens,
                meta={"check": "tokens_in_range"},
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="answer_chars",
                min_value=1 if f.require_clean_end else 0,
                max_value=g.max_answer_chars,
                meta={"check": "answer_length_in_range"},
            ),
        ]

    def _total_expectations(self) -> list[Any]:
        import great_expectations.expectations as gxe

        g = self.config.gate
        out: list[Any] = [
            gxe.ExpectTableRowCountToBeBetween(min_value=g.min_rows, meta={"check": "min_rows"})
        ]
        if g.correctness_floor is not None and g.correctness_scope == "curated":
            out.append(self._floor())
        return out

    def _floor(self) -> Any:
        import great_expectations.expectations as gxe

        return gxe.ExpectColumnMeanToBeBetween(
            column="correct",
            min_value=self.config.gate.correctness_floor,
            max_value=1.0,
            meta={"check": "correctness_floor"},
        )

    def _input_expectations(self) -> list[Any]:
        import great_expectations.expectations as gxe

        g = self.config.gate
        out: list[Any] = [gxe.ExpectTableRowCountToBeBetween(min_value=0, meta={"check": "input_rows"})]
        if g.correctness_floor is not None and g.correctness_scope == "input":
            out.append(self._floor())
        return out

    def _step_expectations(self) -> list[Any]:
        import great_expectations.expectations as gxe

        g = self.config.gate
        out = [
            gxe.ExpectColumnValuesToBeInSet(
                column="role", value_set=list(STEP_ROLES), meta={"check": "roles_in_set"}
            ),
            gxe.ExpectColumnValuesToBeInSet(
                column="agent", value_set=list(g.allowed_agents), meta={"check": "agents_in_set"}
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="content_chars", min_value=1, meta={"check": "turns_non_empty"}
            ),
            gxe.ExpectColumnValuesToBeBetween(
                column="observation_chars",
                min_value=0,
                max_value=g.max_observation_chars,
                meta={"check": "observation_length_in_range"},
            ),
        ]
        if g.allowed_tools is not None:
            out.append(
                gxe.ExpectColumnValuesToBeInSet(
                    column="tool_name", value_set=list(g.allowed_tools), meta={"check": "tools_in_set"}
                )
            )
        return out

    # -- running -----------------------------------------------------------------------------
    def _run(self, suite: str, frame: pd.DataFrame) -> list[dict[str, Any]]:
        result = self._checkpoints[suite].run(batch_parameters={"dataframe": frame})
        checks: list[dict[str, Any]] = []
        for vr in result.run_results.values():
            for r in vr.results:
                cfg = r.expectation_config
                kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
                res = dict(r.result or {})
                exc = r.exception_info or {}
                raised = exc.get("raised_exception") if isinstance(exc, dict) else None
                checks.append(
                    _jsonable(
                        {
                            "suite": suite,
                            "check": (cfg.meta or {}).get("check", cfg.type),
                            "expectation": cfg.type,
                            "kwargs": kwargs,
                            "success": bool(r.success),
                            "observed_value": res.get("observed_value"),
                            "element_count": res.get("element_count"),
                            "unexpected_count": res.get("unexpected_count"),
                            "partial_unexpected": (res.get("partial_unexpected_list") or [])[:20],
                            "exception": exc.get("exception_message") if raised else None,
                        }
                    )
                )
        return checks

    def add_steps(self, steps: pl.DataFrame) -> None:
        """Queue curated steps (:func:`steps_for_gate` layout); full chunks are validated now."""
        if steps.is_empty():
            return
        self._buffer.append(steps)
        self._buffered += steps.height
        chunk = self.config.gate.step_chunk_rows
        while self._buffered >= chunk:
            data = pl.concat(self._buffer)
            self._validate_steps(data.head(chunk))
            rest = data.slice(chunk)
            self._buffer, self._buffered = ([rest] if rest.height else []), rest.height

    def _validate_steps(self, data: pl.DataFrame) -> None:
        self._step_results.append(self._run("curate_steps", data.select(STEP_COLUMNS).to_pandas()))

    def finish(
        self, curated_runs: pl.DataFrame | pl.LazyFrame, input_runs: pl.DataFrame | pl.LazyFrame
    ) -> GateResult:
        """Validate the remaining steps and the run suites; build the Data Docs. The run frames
        may be lazy (e.g. over a file): only one part of the curated runs is in memory at a time."""
        if self._buffered or not self._step_results:
            data = pl.concat(self._buffer) if self._buffer else _empty_steps()
            self._validate_steps(data)
            self._buffer, self._buffered = [], 0
        curated, every = curated_runs.lazy(), input_runs.lazy()
        parts = [self._run("curate_runs", _runs_pandas(part)) for part in self._run_parts(curated)]
        checks = list(_merge(parts))
        checks += self._run("curate_totals", _runs_pandas(curated.select("correct").collect()))
        checks += self._run("curate_input", _runs_pandas(every.select("correct").collect()))
        checks += list(_merge(self._step_results))
        self.ctx.build_data_docs(site_names=[SITE_NAME])
        index = self.docs_dir / "index.html"
        return GateResult(
            success=all(c["success"] for c in checks),
            checks=checks,
            data_docs_index=str(index) if index.exists() else None,
        )

    def _run_parts(self, runs: pl.LazyFrame) -> Iterator[pl.DataFrame]:
        """The runs in parts of about ``run_chunk_rows`` by a hash of the run id, in part order;
        one part is collected at a time."""
        columns = [c for c in RUN_COLUMNS if c in runs.collect_schema().names()]
        runs = runs.select(columns)
        height = int(runs.select(pl.len()).collect().item())
        n_parts = max(1, math.ceil(height / self.config.gate.run_chunk_rows))
        if n_parts == 1:
            yield runs.collect()
            return
        part = pl.col("run_id").hash(seed=0) % n_parts
        for p in range(n_parts):
            chunk = runs.filter(part == p).collect()
            if chunk.height:
                yield chunk


def _runs_pandas(frame: pl.DataFrame) -> pd.DataFrame:
    cols = [c for c in RUN_COLUMNS if c in frame.columns]
    out = frame.select(cols).with_columns(pl.col("correct").cast(pl.Float64))
    return out.to_pandas()


def _empty_steps() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "role": pl.String,
            "agent": pl.String,
            "tool_name": pl.String,
            "content_chars": pl.Int64,
            "observation_chars": pl.Int64,
        }
    )


def _merge(chunks: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """One result per check over all parts: success if every part succeeded, counts summed."""
    if not chunks:
        return
    for i, first in enumerate(chunks[0]):
        parts = [c[i] for c in chunks]
        merged = dict(first)
        merged["success"] = all(p["success"] for p in parts)
        for key in ("element_count", "unexpected_count"):
            values = [p[key] for p in parts if p[key] is not None]
            merged[key] = sum(values) if values else None
        seen: list[Any] = []
        for p in parts:
            for v in p["partial_unexpected"]:
                if v not in seen and len(seen) < 20:
                    seen.append(v)
        merged["partial_unexpected"] = seen
        merged["chunks"] = len(parts)
        exceptions = [p["exception"] for p in parts if p["exception"]]
        merged["exception"] = exceptions[0] if exceptions else None
        yield merged
