"""Per-run filters of the ``curate`` stage, each with a reason code for the quarantine.

Run-level checks (status, run error, final answer, correctness, token and tool-call bounds) are
Polars expressions over the whole batch; step-level checks (tool errors, repeated identical calls)
group the flattened steps of the batch (:func:`coa.curate.frames.step_frame`). Only the CoA check,
an injected per-run callable, runs row by row, and only on runs that passed everything else.

Scoring and the CoA format belong to other modules, so both are injected:

* ``score(final_answer, gold_answers, family) -> bool | None`` (None: cannot score);
* ``coa_check(row) -> str | tuple[str, str] | None``: the error, or None or ``(variant, text)`` when
  the run converts to a valid CoA trajectory; a ``(variant, text)`` is kept in the curated row
  (``coa_variant``, ``coa_text``) so that convert does not convert the run a second time.

Checks run in :data:`FILTER_ORDER`; a rejected run is quarantined with the first failing reason and
its detail, and the other failing reasons are listed after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from coa.curate.config import FilterConfig
from coa.curate.frames import step_frame
from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

Score = Callable[[str | None, list[str], str], bool | None]
"""``score(final_answer, gold_answers, family)``: True/False, or None when it cannot score."""

CoaCheck = Callable[[dict[str, Any]], str | tuple[str, str] | None]
"""``coa_check(trajectory_row)``: why the run does not convert to a valid CoA trajectory, else None or
its rendering ``(variant, assistant text)``."""


class CoaRender(NamedTuple):
    """A run the CoA check converted: its grammar variant and assistant text."""

    variant: str
    text: str


FILTER_ORDER = (
    "unclean_end",
    "unscored",
    "incorrect",
    "too_short",
    "too_long",
    "too_few_tool_calls",
    "too_many_tool_calls",
    "tool_errors",
    "repeated_tool_calls",
    "invalid_coa",
)
"""Reason codes of the filters, in the order they are checked (``unclean_end`` carries a suffix:
``unclean_end:<status>``, ``unclean_end:error``, ``unclean_end:no_answer``)."""

REPEAT_ROLES = ("tool_call", "delegate")


@dataclasses.dataclass(frozen=True)
class Rejection:
    """Why one run is quarantined: a machine-readable code and a human-readable detail."""

    reason: str
    detail: str


def _check(cond: pl.Expr, reason: str | pl.Expr, detail: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    reason_expr = pl.lit(reason) if isinstance(reason, str) else reason
    return (
        pl.when(cond).then(reason_expr).otherwise(None),
        pl.when(cond).then(detail.fill_null("")).otherwise(None),
    )


def _run_checks(cfg: FilterConfig, score_errors: pl.Expr) -> list[tuple[pl.Expr, pl.Expr]]:
    checks: list[tuple[pl.Expr, pl.Expr]] = []
    if cfg.require_clean_end:
        status, error = pl.col("status"), pl.col("error")
        no_answer = pl.col("final_answer").is_null() | (pl.col("final_answer").str.strip_chars() == "")
        checks.append(
            (
                pl.when(status != "completed")
                .then(pl.lit("unclean_end:") + status)
                .when(error.is_not_null())
                .then(pl.lit("unclean_end:error"))
                .when(no_answer)
                .then(pl.lit("unclean_end:no_answer"))
                .otherwise(None),
                pl.when(status != "completed")
                .then(pl.lit("run ended with status ") + status + pl.lit(": ") + error.fill_null("no error"))
                .when(error.is_not_null())
                .then(pl.lit("run error: ") + error)
                .when(no_answer)
                .then(pl.lit("the run has no final answer"))
                .otherwise(None),
            )
        )
    if cfg.require_correct:
        if not cfg.keep_unscored:
            checks.append(
                _check(
                    pl.col("correct").is_null(),
                    "unscored",
                    pl.lit("the scorer could not judge the final answer")
                    + pl.when(score_errors.is_not_null())
                    .then(pl.lit(" (") + score_errors + pl.lit(")"))
                    .otherwise(pl.lit("")),
                )
            )
        checks.append(
            _check(
                pl.col("correct").eq(False).fill_null(False),
                "incorrect",
                pl.lit("final answer ")
                + pl.col("final_answer").str.slice(0, 200).fill_null("<none>")
                + pl.lit(" does not match gold ")
                + pl.col("gold_answers").list.join(" | ").str.slice(0, 200),
            )
        )
    tokens = pl.col("completion_tokens") + (
        pl.col("prompt_tokens") if cfg.token_measure == "total" else pl.lit(0, dtype=pl.Int64)
    )
    what = "tokens" if cfg.token_measure == "total" else "completion tokens"
    calls = pl.col("n_tool_calls")
    checks += _bounds(tokens, what, cfg.min_tokens, cfg.max_tokens, ("too_short", "too_long"))
    checks += _bounds(
        calls,
        "tool calls",
        cfg.min_tool_calls,
        cfg.max_tool_calls,
        ("too_few_tool_calls", "too_many_tool_calls"),
    )
    return checks


def _bounds(
    value: pl.Expr, what: str, low: int | None, high: int | None, reasons: tuple[str, str]
) -> list[tuple[pl.Expr, pl.Expr]]:
    """The checks ``value >= low`` (failing as ``reasons[0]``) and ``value <= high`` (``reasons[1]``),
    each where its bound is set, with a detail such as ``"12 tool calls > max 10"``."""
    checks = []
    if low is not None:
        detail = value.cast(pl.String) + pl.lit(f" {what} < min {low}")
        checks.append(_check(value < low, reasons[0], detail))
    if high is not None:
        detail = value.cast(pl.String) + pl.lit(f" {what} > max {high}")
        checks.append(_check(value > high, reasons[1], detail))
    return checks


def _step_stats(table: pa.Table, cfg: FilterConfig) -> pl.DataFrame:
    """Per run: tool errors (count, first message) and the most repeated identical call."""
    rows = pl.DataFrame({"row": pl.int_range(0, table.num_rows, dtype=pl.Int64, eager=True)})
    if cfg.max_tool_errors is None and cfg.max_repeated_calls is None:
        return rows
    steps = step_frame(table, ("role", "tool_name", "tool_args", "error"))
    if cfg.max_tool_errors is not None:
        errors = (
            steps.filter((pl.col("role") == "tool_call") & pl.col("error").is_not_null())
            .group_by("row")
            .agg(n_tool_errors=pl.len(), first_tool_error=pl.col("error").first())
        )
        rows = rows.join(errors, on="row", how="left")
    if cfg.max_repeated_calls is not None:
        repeats = (
            steps.filter(pl.col("role").is_in(REPEAT_ROLES))
            .group_by("row", "tool_name", "tool_args")
            .agg(n_same=pl.len())
            .sort("row", "n_same", "tool_name", "tool_args", descending=[False, True, False, False])
            .group_by("row", maintain_order=True)
            .first()
            .rename({"tool_name": "repeat_tool", "tool_args": "repeat_args", "n_same": "max_repeat"})
        )
        rows = rows.join(repeats, on="row", how="left")
    return rows.sort("row")


def _step_checks(cfg: FilterConfig) -> list[tuple[pl.Expr, pl.Expr]]:
    checks: list[tuple[pl.Expr, pl.Expr]] = []
    if cfg.max_tool_errors is not None:
        n = pl.col("n_tool_errors").fill_null(0)
        checks.append(
            _check(
                n > cfg.max_tool_errors,
                "tool_errors",
                n.cast(pl.String)
                + pl.lit(f" tool calls failed (max {cfg.max_tool_errors}); first: ")
                + pl.col("first_tool_error").str.slice(0, 300),
            )
        )
    if cfg.max_repeated_calls is not None:
        n = pl.col("max_repeat").fill_null(0)
        checks.append(
            _check(
                n > cfg.max_repeated_calls,
                "repeated_tool_calls",
                pl.col("repeat_tool").fill_null("<none>")
                + pl.lit(" ")
                + pl.col("repeat_args").fill_null("").str.slice(0, 300)
                + pl.lit(" called ")
                + n.cast(pl.String)
                + pl.lit(f" times (max {cfg.max_repeated_calls})"),
            )
        )
    return checks


def vector_checks(
    table: pa.Table, cfg: FilterConfig, score_errors: Sequence[str | None] | None = None
) -> list[Rejection | None]:
    """Every filter but the CoA check, vectorised over the batch; one entry per run."""
    if table.num_rows == 0:
        return []
    errs = list(score_errors) if score_errors is not None else [None] * table.num_rows
    runs = pl.DataFrame(
        pl.from_arrow(
            table.select(
                [
                    "status",
                    "error",
                    "final_answer",
                    "gold_answers",
                    "correct",
                    "prompt_tokens",
                    "completion_tokens",
                    "n_tool_calls",
                ]
            )
        )
    ).with_columns(score_error=pl.Series("score_error", errs, dtype=pl.String))
    frame = pl.concat([runs, _step_stats(table, cfg).drop("row")], how="horizontal")
    checks = _run_checks(cfg, pl.col("score_error")) + _step_checks(cfg)
    if not checks:
        return [None] * table.num_rows
    reasons = [c[0].alias(f"r{i}") for i, c in enumerate(checks)]
    details = [c[1].alias(f"d{i}") for i, c in enumerate(checks)]
    out = frame.select(
        reason=pl.coalesce(reasons),
        detail=pl.coalesce(details),
        all_reasons=pl.concat_list(reasons).list.drop_nulls(),
    )
    result: list[Rejection | None] = []
    for reason, detail, every in out.iter_rows():
        if reason is None:
            result.append(None)
            continue
        others = [r for r in every if r != reason]
        suffix = f" [also: {', '.join(others)}]" if others else ""
        result.append(Rejection(reason, f"{detail}{suffix}"))
    return result


@dataclasses.dataclass(frozen=True)
class RowView:
    """The part of a ``trajectory.v1`` row an injected check reads: run columns and step fields.

    Rows handed to the check are cut down to these with Arrow before they become Python dicts,
    so the fields it never reads (timestamps, token counts, latencies…) are never converted.
    """

    columns: tuple[str, ...]
    step_fields: tuple[str, ...]


def view_rows(table: pa.Table, view: RowView | None) -> list[dict[str, Any]]:
    """The rows of ``table`` as dicts, narrowed to ``view`` (None: every column and step field)."""
    if view is None:
        return table.to_pylist()
    data: dict[str, pa.Array] = {}
    for name in view.columns:
        column = table.column(name)
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if name == "steps":
            flat = pc.list_flatten(array)
            narrow = pa.StructArray.from_arrays(
                [pc.struct_field(flat, f) for f in view.step_fields], names=list(view.step_fields)
            )
            offsets = pc.subtract(array.offsets, array.offsets[0])
            array = pa.ListArray.from_arrays(offsets, narrow, mask=array.is_null())
        data[name] = array
    return pa.table(data).to_pylist()


def check_coa(
    rows: Sequence[dict[str, Any]], coa_check: CoaCheck
) -> tuple[list[Rejection | None], list[CoaRender | None]]:
    """The injected CoA check per run: (its rejection or None, its rendering or None) per row; a
    raising check counts as invalid with its error."""
    verdicts: list[Rejection | None] = []
    renders: list[CoaRender | None] = []
    for row in rows:
        try:
            outcome = coa_check(row)
        except Exception as e:  # noqa: BLE001 - a converter crash is a reason, not a stage failure
            outcome = f"CoA check raised {type(e).__name__}: {e}"
        if isinstance(outcome, str):
            verdicts.append(Rejection("invalid_coa", outcome[:2000]))
            renders.append(None)
        else:
            verdicts.append(None)
            renders.append(CoaRender(*outcome) if outcome is not None else None)
    return verdicts, renders
