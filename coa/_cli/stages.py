"""One stage at a time: ``coa tasks import|synthetic``, ``collect``, ``curate``, ``convert``, ``model init``,
``sft``, ``rl``, ``evaluate``, ``eval-report`` and ``export``.

Every command builds the same :class:`~coa.steps.Step` the pipeline's plan builds and runs it through
:func:`coa._cli.common._run`, so ``coa collect …`` and the flow give the same artifact for the same inputs.
What it prints of the step is what the step's stage presents (:func:`coa._cli.facts.show_step`: the
facts the Prefect layer publishes), beside the artifact's URI on a line of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from coa import io
from coa._cli.common import _config, _fail, _model, _raw_table, _run, _table, err
from coa._cli.facts import show_step
from coa.collect.summary import CollectSummary
from coa.errors import UserError
from coa.tasksets.config import Family, TaskSourceConfig


def tasks_import(
    sources: Annotated[
        list[str], typer.Argument(help="Task files (.json/.jsonl/.parquet) or datasets folders")
    ],
    family: Annotated[
        str | None, typer.Option(help="Family for plain question/answer files: web|mhqa|math|code")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Source name for task ids (only with one SRC)")] = None,
    limit: Annotated[int | None, typer.Option(help="Keep the first N usable rows of each source")] = None,
    artifact: Annotated[str, typer.Option(help="Artifact name (tasks.name in a profile)")] = "tasks",
) -> None:
    """Import task sets into a task.v1 artifact (+ a quarantine of unusable rows) in the store.

    The artifact is the one the pipeline builds from a profile whose ``tasks`` section lists the same
    files with the same settings (same key, reused by either)."""
    from coa.tasksets import TasksConfig
    from coa.tasksets import step as tasksets

    if name and len(sources) > 1:
        raise UserError("--name applies to a single source; give one SRC or set names in a config file")
    if family is not None and family not in ("web", "mhqa", "math", "code"):
        raise UserError(f"--family must be one of web, mhqa, math, code (got {family!r})")
    fam: Family | None = family  # type: ignore[assignment]
    config = TasksConfig(
        name=artifact,
        sources=tuple(TaskSourceConfig(path=s, name=name, family=fam, limit=limit) for s in sources),
    )
    step = tasksets.step(config)
    result = _run(step)
    show_step(step, result)
    typer.echo(result.ref.uri)


def tasks_synthetic(
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. synthetic.train.multihop=50")
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with a synthetic section")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Generate the built-in synthetic task families (train + held-out) into a task.v1 artifact."""
    from coa.synthetic import step as synthetic

    cfg = _config(config, overrides, "synthetic")
    step = synthetic.step(cfg.synthetic)
    result = _run(step)
    show_step(step, result)
    typer.echo(result.ref.uri)


_ENCYCLOPEDIA_HELP = (
    "Artifact whose `encyclopedia` table (document.v1) the local search serves (from `coa tasks synthetic`)"
)


def _encyclopedia(uri: str | None, tasks: Any = None) -> Any:
    """The table a stage command's local search serves: ``--encyclopedia``'s, else the task
    artifact's own (a synthetic task set carries the encyclopedia its questions were drawn from),
    else none (a local search then refuses to start, saying so)."""
    from coa.synthetic.step import ENCYCLOPEDIA_TABLE
    from coa.tools.collection import INPUT

    if uri is not None:
        return _table(uri, ENCYCLOPEDIA_TABLE, "coa tasks synthetic")
    if tasks is not None and INPUT in tasks.ref.tables:
        return _table(tasks.uri, ENCYCLOPEDIA_TABLE, "coa tasks synthetic")
    return None


def collect(
    tasks: Annotated[str, typer.Option("--tasks", help="task.v1 artifact to solve (from `coa tasks …`)")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. collect.concurrency=8")
    ] = None,
    table: Annotated[str | None, typer.Option(help="Table of the task artifact (default: its first)")] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with a collect section")
    ] = Path("configs/demo.yaml"),
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Then re-run only the runs that ended in an error, into a new artifact that keeps the rest "
            "(also: collect.retry_failed=true)",
        ),
    ] = False,
    encyclopedia: Annotated[
        str | None, typer.Option(help=_ENCYCLOPEDIA_HELP + "; default: the task artifact's own")
    ] = None,
) -> None:
    """Run the multi-agent teacher on every task; checkpointed, resumable after a crash or a kill."""
    from coa.collect import step as collect_step
    from coa.steps import TableInput

    cfg = _config(config, overrides, "collect")
    task_input = _table(tasks, table, "coa tasks import | coa tasks synthetic")
    documents = _encyclopedia(encyclopedia, task_input)
    step = collect_step.step(cfg.collect, task_input, encyclopedia=documents)
    result = _run(step, execution=cfg.execution)
    s = CollectSummary.from_dict(result.summary)
    _say_resumed(s)
    if retry_failed or cfg.collect.retry_failed:
        failed = s.statuses.get(collect_step.FAILED_STATUS, 0)
        err.print(f"retrying {failed} failed run(s) of {result.ref.uri}", highlight=False)
        previous = TableInput(result.ref, collect_step.TABLE)
        step = collect_step.retry_step(cfg.collect, previous, task_input, encyclopedia=documents)
        result = _run(step)
        s = CollectSummary.from_dict(result.summary)
        _say_resumed(s)
        r = s.repaired
        retried, sent, still = (r.retried, r.requests_sent, r.still_failed) if r else (0, 0, 0)
        err.print(
            f"retried {retried} failed run(s): {sent} LLM request(s) sent, {still} still failed",
            highlight=False,
        )
    typer.echo(f"trajectories: {result.ref.uri}")
    show_step(step, result)


def _say_resumed(summary: CollectSummary) -> None:
    outcome = summary.collect
    if outcome is not None and outcome.resumed:
        err.print(f"resumed {outcome.resumed} of {outcome.planned} runs from checkpoints", highlight=False)


def curate(
    raw: Annotated[
        str,
        typer.Option(
            "--raw",
            help="trajectory.v1 artifact from `coa collect`, or an RL artifact from `coa rl` (its rollout.v1 "
            "table: correct, format-valid rollouts become runs for the next SFT round)",
        ),
    ],
    tasks: Annotated[str, typer.Option("--tasks", help="task.v1 artifact the runs solved (code tests)")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. curate.filters.max_tool_calls=20")
    ] = None,
    table: Annotated[str | None, typer.Option(help="Table of the task artifact (default: its first)")] = None,
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML profile with a curate section")] = Path(
        "configs/demo.yaml"
    ),
) -> None:
    """Filter, deduplicate, decontaminate and gate raw trajectories or RL rollouts; writes the report."""
    from coa.curate import step as curate_step

    cfg = _config(config, overrides, "curate")
    raw_input = _table(raw, _raw_table(raw), "coa collect | coa rl")
    step = curate_step.step(cfg.curate, raw_input, _table(tasks, table, "coa tasks import"))
    result = _run(step, execution=cfg.execution)
    typer.echo(f"curated: {result.ref.uri}")
    show_step(step, result)


def convert(
    curated: Annotated[str, typer.Option("--curated", help="Artifact from `coa curate`")],
    tasks: Annotated[str, typer.Option("--tasks", help="task.v1 artifact (RL prompts come from it)")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. convert.max_pass_rate=0.3")
    ] = None,
    table: Annotated[str | None, typer.Option(help="Table of the task artifact (default: its first)")] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with a convert section")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Convert curated runs into CoA SFT examples (sft.v1) and RL prompts (rl_prompt.v1)."""
    from coa.convert import step as convert_step

    cfg = _config(config, overrides, "convert")
    curated_input = _table(curated, "trajectories", "coa curate")
    step = convert_step.step(cfg.convert, curated_input, _table(tasks, table, "coa tasks import"))
    result = _run(step)
    typer.echo(f"converted: {result.ref.uri}")
    show_step(step, result)


def model_init(
    data: Annotated[str, typer.Option("--data", help="Artifact from `coa convert` (its sft table)")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. student.tiny.hidden_size=256")
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with a student section")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Build the tiny student: a tokenizer trained on the SFT texts (CoA tags as tokens, ChatML) and a
    random-init Qwen2 decoder, as a model artifact any later stage loads like a Hugging Face folder."""
    from coa.model import step as student_step
    from coa.model.config import StudentConfig

    student = _config(config, overrides).student or StudentConfig()
    if student.base is not None:
        raise UserError(
            f"student.base is {student.base!r}: nothing to build (unset it to build the tiny model)"
        )
    step = student_step.step(student, _table(data, "sft", "coa convert"))
    result = _run(step)
    typer.echo(f"model: {result.ref.uri}")
    show_step(step, result)


def sft(
    data: Annotated[str, typer.Option("--data", help="Artifact from `coa convert` (its sft table)")],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Base model: folder, hub id, model artifact or champion:NAME (default: the config's)",
        ),
    ] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides, e.g. sft.max_steps=200")] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with student and sft sections")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Fine-tune the student on CoA examples (observations masked); resumes after a crash or a kill."""
    import logging

    from coa.model.config import StudentConfig
    from coa.plan.choices import start_model
    from coa.steps import ModelInput
    from coa.train import step as sft_step

    cfg = _config(config, overrides, "sft")
    examples = _table(data, "sft", "coa convert")
    base, first = start_model(cfg.student or StudentConfig(), examples, _model(model) if model else None)
    for built in first:  # the tiny student, built on the examples' texts
        base = ModelInput(ref=_run(built).ref)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("coa.train.sft").setLevel(logging.INFO)
    step = sft_step.step(cfg.sft, base, examples)
    result = _run(step)
    typer.echo(f"model: {result.ref.uri}")
    show_step(step, result)


def rl(
    data: Annotated[str, typer.Option("--data", help="Artifact from `coa convert` (its rl_prompts table)")],
    model: Annotated[
        str, typer.Option("--model", help="Model to train: the SFT model artifact, a folder or hub id")
    ],
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides, e.g. rl.max_steps=20")] = None,
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML profile with an rl section")] = Path(
        "configs/demo.yaml"
    ),
    evaluation: Annotated[
        str | None,
        typer.Option(
            "--eval",
            help="Artifact from `coa evaluate` of the model on held-out tasks: picks the family with "
            "rl.families: auto",
        ),
    ] = None,
    encyclopedia: Annotated[str | None, typer.Option(help=_ENCYCLOPEDIA_HELP)] = None,
) -> None:
    """Agentic RL: GRPO/DAPO on multi-turn tool rollouts of the model; resumes after a crash or a kill."""
    import logging

    from coa.rl import step as rl_step

    cfg = _config(config, overrides, "rl")
    prompts = _table(data, "rl_prompts", "coa convert")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("coa.rl").setLevel(logging.INFO)
    judged = _table(evaluation, "eval", "coa evaluate") if evaluation is not None else None
    documents = _encyclopedia(encyclopedia)
    step = rl_step.step(cfg.rl, _model(model), prompts, evaluation=judged, encyclopedia=documents)
    result = _run(step)
    typer.echo(f"model: {result.ref.uri}")
    show_step(step, result)


def evaluate(
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model folder, hub id, model artifact or champion:NAME (the registry)"),
    ] = None,
    tasks: Annotated[
        str | None,
        typer.Option(
            "--tasks",
            help="task.v1 artifact (`coa tasks import` / `coa tasks synthetic`); "
            "default: the benchmarks of evaluate.benchmarks",
        ),
    ] = None,
    table: Annotated[
        str | None,
        typer.Option(help="Table of the task artifact (default: heldout if it has one, else its first)"),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="First N tasks of each benchmark", min=1)] = None,
    samples: Annotated[int | None, typer.Option(help="Episodes per task (pass@k, maj@k)", min=1)] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. evaluate.temperature=0.6")
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with an evaluate section")
    ] = Path("configs/demo.yaml"),
    predictions: Annotated[
        list[Path] | None,
        typer.Option(
            "--predictions", help="Score these prediction files instead of running a model (coa score)"
        ),
    ] = None,
    encyclopedia: Annotated[
        str | None, typer.Option(help=_ENCYCLOPEDIA_HELP + "; default: the task artifact's own")
    ] = None,
) -> None:
    """Run a CoA model on tasks with the real tools; write eval.v1 and metrics.json, and print
    pass@1 ± its standard error, pass@k, maj@K, format-valid rate, tokens and tool calls per
    benchmark and per family. With --predictions, score prediction files instead (as `coa score`)."""
    from coa.evaluate import step as eval_step
    from coa.evaluate.config import EvalConfig
    from coa.plan.choices import eval_tools

    cfg = _config(config, overrides)
    eval_cfg = cfg.evaluate or EvalConfig()
    update: dict[str, Any] = {}
    if limit is not None:
        update["limit_per_benchmark"] = limit
    if samples is not None:
        update["samples"] = samples
    eval_cfg = eval_cfg.model_copy(update=update)
    if tasks and table is None and "heldout" in io.open_artifact(tasks).tables:
        table = "heldout"  # a synthetic task set: never evaluate on its training split by default
    if predictions:
        from coa._cli.score import evaluate_predictions

        return evaluate_predictions(predictions, tasks, table, eval_cfg)
    if model is None:
        raise UserError("coa evaluate needs --model (or --predictions FILE to score predictions)")
    task_input = _table(tasks, table, "coa tasks import | coa tasks synthetic") if tasks else None
    documents = _encyclopedia(encyclopedia, task_input)
    step = eval_step.step(eval_cfg, eval_tools(cfg), task_input, _model(model), encyclopedia=documents)
    result = _run(step)
    typer.echo(f"eval: {result.ref.uri}")
    show_step(step, result)


def eval_report(
    candidate: Annotated[str, typer.Argument(help="eval artifact (from `coa evaluate`)")],
    baseline: Annotated[
        str | None, typer.Option(help="eval artifact of the baseline (e.g. the model in production)")
    ] = None,
    teacher: Annotated[
        str | None, typer.Option(help="trajectory artifact: the teacher's runs on the same tasks")
    ] = None,
    tasks: Annotated[
        str | None, typer.Option(help="task artifact the teacher ran on (with --teacher)")
    ] = None,
) -> None:
    """HTML evaluation report: pass@1 with intervals and pass@k per benchmark, accuracy against tokens
    beside the teacher, and per-benchmark deltas against a baseline with paired bootstrap intervals."""
    from coa.evaluate.step import eval_report_step

    step = eval_report_step(
        "eval-report",
        _table(candidate, "eval", "coa evaluate"),
        teacher=_table(teacher, None, "coa collect") if teacher else None,
        tasks=_table(tasks, None, "coa tasks import") if tasks else None,
        baseline=_table(baseline, "eval", "coa evaluate") if baseline else None,
    )
    result = _run(step)
    typer.echo(f"eval-report: {result.ref.uri}")
    show_step(step, result)


def export_cmd(
    uri: Annotated[str, typer.Argument(help="Artifact from `coa convert`")],
    out: Annotated[str, typer.Argument(help="Output file (afm-sft: .json, afm-rl: .parquet) or folder (hf)")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="afm-sft | afm-rl | hf")] = "hf",
    grammar: Annotated[
        str | None,
        typer.Option(help="afm-sft/afm-rl: mhqa = multi-hop rows in AFM's MHQA grammar (<wiki_search>)"),
    ] = None,
) -> None:
    """Export converted data: AFM alpaca SFT JSON, AFM RL Parquet, or a `datasets`-loadable folder."""
    from coa.convert.export import export

    try:
        typer.echo(export(uri, fmt, out, grammar))
    except ValueError as e:
        raise _fail(str(e)) from None
