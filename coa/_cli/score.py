"""``coa score`` and ``coa evaluate --predictions``: prediction files scored with the benchmarks' scorers.

``coa score --predictions FILE --tasks T`` re-scores predictions made elsewhere (a JSONL of ``task_id,
prediction``, or AFM's released ``*.round_<r>.jsonl`` files) against a task set (a ``task.v1``
artifact, or a benchmark file imported on the fly exactly as ``coa tasks import`` would) and prints
the metrics per benchmark and family with each benchmark's scorer; ``--out`` writes the metrics
document. ``coa evaluate --predictions FILE…`` commits the same rows and metrics as an ``eval``
artifact (:func:`coa.evaluate.step.predictions_step`). Both call
:func:`coa.evaluate.predictions.score_prediction_files`, so their numbers are the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from coa import io
from coa._cli.common import _config, _run, _table
from coa.errors import UserError


def _tasks(tasks: str, table: str | None) -> list[dict[str, Any]]:
    """The task rows of ``tasks``: a committed task artifact, else a benchmark file to import."""
    if io.lookup(tasks) is not None:
        return list(_table(tasks, table, "coa tasks import").read().to_pylist())
    if not Path(tasks).exists():
        raise UserError(f"--tasks {tasks}: neither a task artifact nor a file (coa tasks import makes one)")
    from coa.tasksets import import_tasks
    from coa.tasksets.config import TaskSourceConfig

    return list(import_tasks([TaskSourceConfig(path=tasks)]).tasks.to_pylist())


def score(
    predictions: Annotated[
        list[Path],
        typer.Option(
            "--predictions",
            "-p",
            help="JSONL of task_id, prediction (or AFM round files); repeat for several",
        ),
    ],
    tasks: Annotated[str, typer.Option("--tasks", help="task.v1 artifact, or a benchmark file to import")],
    table: Annotated[str | None, typer.Option(help="Table of the task artifact (default: its first)")] = None,
    limit: Annotated[int | None, typer.Option(help="First N tasks of each benchmark", min=1)] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the metrics document (JSON) here")] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. evaluate.scorers.my_set=gaia")
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile (its evaluate section: judge, scorers)")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Score prediction files with each benchmark's own scorer and print pass@1, pass@k and maj@K per
    benchmark and family (the numbers `coa evaluate --predictions` commits)."""
    from coa.evaluate.config import EvalConfig
    from coa.evaluate.metrics import format_metrics_table
    from coa.evaluate.predictions import score_prediction_files
    from coa.evaluate.stage import select_tasks

    cfg = _config(config, overrides)
    eval_cfg = cfg.evaluate or EvalConfig()
    if limit is not None:
        eval_cfg = eval_cfg.model_copy(update={"limit_per_benchmark": limit})
    rows = _tasks(tasks, table)
    in_sets: dict[str, int] = {}
    for row in rows:
        in_sets[row["source"]] = in_sets.get(row["source"], 0) + 1
    import pyarrow as pa

    selected = select_tasks(pa.Table.from_pylist(rows), eval_cfg) if rows else []
    judge = None
    if eval_cfg.judge is not None:
        from coa.scoring.judge import LLMJudge

        judge = LLMJudge(eval_cfg.judge)
    try:
        _, document = score_prediction_files(
            selected, [str(p) for p in predictions], judge=judge, scorers=eval_cfg.scorers, in_sets=in_sets
        )
    finally:
        if judge is not None:
            judge.close()
    typer.echo(format_metrics_table(document["benchmarks"], "benchmark"))
    typer.echo("")
    typer.echo(format_metrics_table(document["families"]))
    typer.echo("")
    for bench, entry in document["scorers"].items():
        names = ", ".join(
            f"{s['name']} v{s['version']}" + (f" ({s['package']})" if s.get("package") else "")
            for s in entry["scorers"]
        )
        cover = document["coverage"][bench]
        typer.echo(f"{bench}: scored by {names}; {cover['tasks_scored']} of {cover['tasks_in_set']} tasks")
        if "note" in entry:
            typer.echo(f"  note: {entry['note']}")
    missing = document["predictions"]["runs_without_prediction"]
    if missing:
        typer.echo(f"{missing} task sample(s) had no prediction in the file(s): scored as wrong")
    if out is not None:
        out.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", "utf-8")
        typer.echo(f"metrics: {out}")


def evaluate_predictions(
    predictions: list[Path], tasks: str | None, table: str | None, eval_cfg: Any
) -> None:
    """``coa evaluate --predictions``: commit an ``eval`` artifact from prediction files."""
    from coa._cli.facts import show_step
    from coa.evaluate.step import predictions_step

    task_input = _table(tasks, table, "coa tasks import | coa tasks synthetic") if tasks else None
    step = predictions_step(eval_cfg, task_input, [str(p) for p in predictions])
    result = _run(step)
    typer.echo(f"eval: {result.ref.uri}")
    show_step(step, result)
