"""``coa run``: the pipeline flow on a profile (``--dry-run`` prints the plan, ``--only`` picks stages)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coa._cli.common import _config, _fail, console
from coa.errors import UserError

if TYPE_CHECKING:
    from coa.plan.run_result import RunResult, StageRow


def run(
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Dotted key=value overrides, e.g. tasks.name=x")
    ] = None,
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML profile")] = Path("configs/demo.yaml"),
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan (steps, keys, reuse) and run nothing")
    ] = False,
    only: Annotated[
        str | None,
        typer.Option(
            "--only",
            help="Run only these stages (comma-separated, e.g. collect,curate); the "
            "steps in front of them must be committed (they are reused)",
        ),
    ] = None,
) -> None:
    """Run the pipeline flow (Prefect) on a config profile with optional overrides."""
    from coa.plan import not_planned, plan
    from coa.plan.preview import preview, select

    cfg = _config(config, overrides)
    chosen = [o.strip() for o in only.split(",") if o.strip()] if only else None
    steps = plan(cfg)
    select(steps, chosen)  # fail fast on an unknown stage name
    if dry_run:
        _print_plan(preview(steps), chosen, not_planned(cfg, steps))
        return
    # The orchestration skin is loaded only here: the CLI is the one module of coa above the Prefect
    # layer (the import contracts in pyproject.toml), and the other commands start without Prefect.
    from flows.pipeline import pipeline

    state: Any = pipeline(
        config_path=str(config), overrides=list(overrides or []), only=chosen, return_state=True
    )
    if state.is_failed():
        raise _failed_run(state.message or "the pipeline run failed")
    result: RunResult = state.result()
    _print_stage_table(result.stages)
    _print_training_speed(result)
    if result.comparison:
        from coa.evaluate.training_report import format_comparison

        typer.echo("\nstudent on held-out tasks, before and after SFT, beside the teacher:")
        typer.echo(format_comparison(result.comparison))  # plain: a rich console would wrap it
    if result.changes:
        from coa.evaluate.changes import CHANGES_LEGEND, format_changes

        typer.echo(f"\nwhat each step changed ({CHANGES_LEGEND}):")
        typer.echo(format_changes(result.changes))
    if result.report:
        console.print(f"curation report: {result.report}")
    if result.training_report:
        console.print(f"training report: {result.training_report}")


def _failed_run(message: str) -> typer.Exit:
    """The exit of a failed flow run: its one-line reason, the exit code of its kind of error."""
    from coa.errors import CheckFailed, InfraError

    codes = {cls.kind: cls.exit_code for cls in (UserError, CheckFailed, InfraError)}
    code = next((c for kind, c in codes.items() if f"{kind}:" in message), 1)
    return _fail(message, code)


def _print_plan(planned: list[Any], only: list[str] | None, skipped: dict[str, str]) -> None:
    table = Table(title="pipeline plan" + (f" (--only {','.join(only)})" if only else ""))
    for col in ("step", "artifact kind", "key", "will"):
        table.add_column(col)
    for p in planned:
        selected = not only or any(p.name == o or p.name.startswith(o + ".") for o in only)
        will = p.status if selected else f"{p.status} (outside --only: reuse only)"
        table.add_row(p.name, p.kind, p.key or "(after its inputs)", will)
    for stage, why in skipped.items():
        table.add_row(stage, "", "", why)
    console.print(table)


def _print_stage_table(stages: Sequence[StageRow]) -> None:
    table = Table(title="pipeline stages")
    for col in ("stage", "status", "rows", "time", "peak RSS", "artifact"):
        table.add_column(col, justify="right" if col in ("rows", "time", "peak RSS") else "left")
    for s in stages:
        took = "" if s.wall_s is None else _duration(s.wall_s)
        peak = "" if s.peak_rss_mib is None else f"{s.peak_rss_mib / 1024:.2f} GiB"
        table.add_row(s.stage, s.status, "" if s.rows is None else str(s.rows), took, peak, s.artifact or "")
    console.print(table)
    metered = [s for s in stages if s.peak_rss_mib is not None]
    if metered:
        top = max(metered, key=lambda s: s.peak_rss_mib or 0.0)
        console.print(f"peak memory of the steps built: {top.peak_rss_mib or 0.0:,.0f} MiB, in {top.stage}")


def _print_training_speed(result: RunResult) -> None:
    """For each SFT step built in this run: its steps, tokens a second and steps a minute, and on what."""
    from coa import io
    from coa.evaluate.training_report import throughput
    from coa.train.config import SFT

    for row in result.stages:
        ref = result.refs.get(row.stage)
        if row.status == "built" and ref is not None and SFT.result_file in ref.files:
            sft = json.loads(io.read_file(ref, SFT.result_file))
            # plain: a rich console would wrap it
            typer.echo(f"{row.stage}: {sft['steps_run']:,} steps, {throughput(sft)}")


def _duration(seconds: float) -> str:
    """``42 s``, ``14:13`` (minutes:seconds)."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}"
