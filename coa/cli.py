"""The ``coa`` command line: run the pipeline, run one stage, inspect and validate artifacts.

Every stage command builds the same :class:`~coa.steps.Step` the pipeline's plan builds and runs it
through :func:`coa.steps.run_step`, so ``coa collect …`` and the flow give the same artifact for the
same inputs. Every command has ``--help``. Errors are one line with the fix, no traceback
(:func:`main`); exit codes: 0 success, 1 a check failed (contract, gate, steps-run guard), 2 bad
input or usage (a file, a config key, a missing artifact), 3 missing infrastructure (sandbox,
endpoint).
"""

from __future__ import annotations

import json
import posixpath
import sys
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

import schemas
from coa import io
from coa.config import ConfigError
from coa.errors import CoaError, UserError, describe
from coa.tasksets.config import Family, TaskSourceConfig


class _OneLineErrors(TyperGroup):
    """The top-level group: a project error (:class:`~coa.errors.CoaError`) from any command is one
    line on stderr and its exit code (2 input, 1 check failed, 3 infrastructure), never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except CoaError as e:
            err.print(f"[bold red]error:[/] {describe(e)}", highlight=False, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None
        except OSError as e:  # a full disk outside a step (the runner raises StorageFull inside one)
            if not io.is_disk_full(e):
                raise
            full = io.StorageFull(f"no space left on the device ({e}): free space and rerun")
            err.print(f"[bold red]error:[/] {describe(full)}", highlight=False, soft_wrap=True)
            raise typer.Exit(full.exit_code) from None


app = typer.Typer(
    help="coa-pipeline: a factory for Chain-of-Agents agent models.", no_args_is_help=True, cls=_OneLineErrors
)
tasks_app = typer.Typer(
    help="Task sets: import benchmark and training task files into task.v1.", no_args_is_help=True
)
app.add_typer(tasks_app, name="tasks")
tool_app = typer.Typer(
    help="Run one tool and print the observation the model would see.", no_args_is_help=True
)
app.add_typer(tool_app, name="tool")
model_app = typer.Typer(help="Student models: build the tiny local student.", no_args_is_help=True)
app.add_typer(model_app, name="model")
format_app = typer.Typer(help="The Chain-of-Agents format: check trajectories against a grammar variant.")
app.add_typer(format_app, name="format")
models_app = typer.Typer(
    help="The model registry: champions (what `--model champion:NAME` names) and their history.",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")
console = Console()
err = Console(stderr=True)
CHAMPION_PREFIX = "champion:"


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _config(path: Path, overrides: list[str] | None, section: str | None = None) -> Any:
    """The pipeline profile with overrides; ``section`` must be configured in it."""
    from coa import tracking
    from coa.plan import load_pipeline_config

    cfg = load_pipeline_config(path, overrides or [])
    if section is not None and getattr(cfg, section) is None:
        raise UserError(f"{path} has no {section} section: add one or pick a profile that has it")
    tracking.use(cfg.tracking)  # the steps this command runs report to the profile's tracker
    return cfg


def _table(uri: str, table: str | None, produced_by: str) -> Any:
    """A table of a committed artifact (default: its first), with a hint of what produces it."""
    from coa.steps import TableInput

    try:
        ref = io.open_artifact(uri)
    except io.ArtifactError as e:
        raise UserError(f"{e} (it is produced by `{produced_by}`)") from None
    name = table or ref.primary_table
    if name not in ref.tables:
        tables = ", ".join(ref.tables)
        if table is not None and ref.kind in _MADE_FROM and _MADE_FROM[ref.kind][0] != produced_by:
            given = _KIND_NAMES.get(ref.kind, ref.kind)
            raise UserError(
                f"{ref.uri} is a {given} artifact (tables: {tables}), not one with a {name!r} table: give "
                f"the artifact `{produced_by}` makes{_MADE_FROM[ref.kind][1].format(uri=ref.uri)}"
            )
        raise UserError(f"{ref.uri} has no table {name!r}; its tables: {tables} (use --table)")
    return TableInput(ref, name)


_KIND_NAMES = {
    "curated": "curated",
    "trajectories": "raw trajectory",
    "converted": "converted",
    "tasks": "task",
}
"""Artifact kind -> how a user calls it in an error."""
_MADE_FROM = {
    "curated": ("coa curate", ", e.g. coa convert --curated {uri} --tasks <task artifact>"),
    "trajectories": ("coa collect", ", e.g. coa curate --raw {uri} --tasks <task artifact>"),
    "tasks": ("coa tasks import | coa tasks synthetic", ""),
}
"""Artifact kind -> (the command that made it, the next command that takes it)."""


def _model_input(value: str) -> Any:
    """A ``--model`` value (a registry name already resolved) as a :class:`~coa.steps.ModelInput`,
    refused in one line when it names no model: a missing folder, an artifact of another kind, a hub
    id that is not in the local cache while offline."""
    import os

    from coa.steps import ModelInput

    hint = "give a model folder, a model artifact (`coa sft` / `coa rl`), a hub id or champion:NAME"
    ref = io.lookup(value)
    if ref is not None:
        if ref.kind != "model":
            given = _KIND_NAMES.get(ref.kind, ref.kind)
            raise UserError(f"--model {value} is a {given} artifact (kind {ref.kind}), not a model: {hint}")
        return ModelInput(ref=ref)
    local = "://" in value or value.startswith(("/", ".", "~")) or os.path.exists(value)
    fs, path = io.filesystem(value) if "://" in value else (None, os.path.expanduser(value))
    if local and not (fs.exists(path) if fs is not None else os.path.isdir(path)):
        raise UserError(f"--model {value}: no such model folder: {hint}")
    if not local and os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        from huggingface_hub import snapshot_download

        try:
            snapshot_download(value, local_files_only=True)
        except Exception:  # noqa: BLE001 - any failure means: not usable offline
            raise UserError(
                f"--model {value}: not a folder, and no hub model of that id is in the local cache "
                f"(HF_HUB_OFFLINE is set): {hint}"
            ) from None
    return ModelInput.parse(value)


def _raw_table(uri: str) -> str:
    """The table ``coa curate`` reads of ``--raw``: a collection's ``trajectories``, else an RL
    artifact's ``rollouts``."""
    try:
        tables = io.open_artifact(uri).tables
    except io.ArtifactError:
        return "trajectories"  # _table reports the missing artifact
    return "rollouts" if "trajectories" not in tables and "rollouts" in tables else "trajectories"


def _model(value: str) -> Any:
    """A model named on the command line: ``champion:NAME`` (resolved through the registry), a
    committed model artifact URI, else a folder or hub id."""
    if value.startswith(CHAMPION_PREFIX):
        from coa.registry import Registry

        value = Registry().resolve(value.removeprefix(CHAMPION_PREFIX))
    return _model_input(value)


def _run(step: Any, label: str | None = None, execution: Any = None) -> Any:
    """Run a step with a progress bar on stderr; print whether it was reused.

    ``execution`` (the profile's ``execution`` section): with ``engine: ray`` the step's shards run on
    Ray through the orchestration skin (:mod:`tasks.fanout`, loaded only then)."""
    import contextlib

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from coa.steps import run_step

    columns = (TextColumn(label or step.name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    shards: Any = contextlib.nullcontext(None)
    if execution is not None and execution.engine != "local":
        from tasks.fanout import executor as fanout_executor

        shards = fanout_executor(execution)
    with shards as executor, Progress(*columns, console=err, transient=True) as bar:
        job = bar.add_task(step.name, total=None)

        def progress(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)

        try:
            result = run_step(step, io.Store(), progress=progress, executor=executor)
        except KeyboardInterrupt:
            raise _fail(f"interrupted: {_saved(step)}", 130) from None
    verb = "reused committed artifact" if result.reused else "built"
    err.print(f"{step.name}: {verb} {result.ref.uri}", highlight=False)
    return result


def _saved(step: Any) -> str:
    """What an interrupted step kept for its rerun, and how to resume (Ctrl-C)."""
    from coa.collect.runs import CheckpointFolder
    from coa.steps import address, resolve

    store = io.Store()
    try:
        uri, _ = address(step, resolve(step, {}), store)
    except (CoaError, KeyError):
        return f"{step.name} was not committed; rerun the same command"
    folder = store.checkpoint_uri(uri)
    fs, path = io.filesystem(folder)
    if not fs.exists(path):
        return f"{step.name} was not committed and saved nothing; rerun the same command to start it again"
    if step.kind == "trajectories":
        runs = len(CheckpointFolder(folder).done())
        return (
            f"{step.name} was not committed; {runs} finished run(s) are checkpointed in {folder}; "
            "rerun the same command to resume from them"
        )
    return f"{step.name} was not committed; its checkpoints are in {folder}; rerun the same command to resume"


# -- coa run ---------------------------------------------------------------------------------


@app.command(context_settings={"allow_extra_args": False})
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
    from coa.steps import preview, select

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
    result = state.result()
    _print_stage_table(result["stages"])
    if result.get("comparison"):
        from coa.evaluate.report import format_comparison

        typer.echo("\nstudent on held-out tasks, before and after SFT, beside the teacher:")
        typer.echo(format_comparison(result["comparison"]))  # plain: a rich console would wrap it
    if result.get("report"):
        console.print(f"curation report: {result['report']}")
    if result.get("training_report"):
        console.print(f"training report: {result['training_report']}")


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


def _print_stage_table(stages: list[dict[str, Any]]) -> None:
    table = Table(title="pipeline stages")
    for col in ("stage", "status", "rows", "artifact"):
        table.add_column(col)
    for s in stages:
        table.add_row(s["stage"], s["status"], str(s.get("rows", "")), s.get("artifact") or s.get("note", ""))
    console.print(table)


# -- coa tasks ---------------------------------------------------------------------------------


@tasks_app.command("import")
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
    result = _run(tasksets.step(config))
    table = Table(title=f"imported into {result.ref.uri}")
    for col in ("source", "layout", "read", "ok", "quarantined"):
        table.add_column(col)
    for s in result.summary.get("sources", []):
        table.add_row(
            s["name"], s["layout"], str(s["rows_read"]), str(s["rows_ok"]), str(s["rows_quarantined"])
        )
    console.print(table)
    typer.echo(result.ref.uri)
    if result.ref.rows("quarantine"):
        console.print(
            f"{result.ref.rows('quarantine')} row(s) quarantined; "
            f"see `coa show {result.ref.uri} --table quarantine`"
        )


@tasks_app.command("synthetic")
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
    result = _run(synthetic.step(cfg.synthetic))
    console.print(f"{result.ref.rows('train')} train and {result.ref.rows('heldout')} held-out tasks")
    typer.echo(result.ref.uri)


# -- one stage at a time -----------------------------------------------------------------------


@app.command()
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
) -> None:
    """Run the multi-agent teacher on every task; checkpointed, resumable after a crash or a kill."""
    from coa.collect import step as collect_step
    from coa.steps import TableInput

    cfg = _config(config, overrides, "collect")
    task_input = _table(tasks, table, "coa tasks import | coa tasks synthetic")
    result = _run(collect_step.step(cfg.collect, task_input), execution=cfg.execution)
    _say_resumed(result.summary)
    if retry_failed or cfg.collect.retry_failed:
        failed = result.summary.get("statuses", {}).get(collect_step.FAILED_STATUS, 0)
        err.print(f"retrying {failed} failed run(s) of {result.ref.uri}", highlight=False)
        previous = TableInput(result.ref, collect_step.TABLE)
        result = _run(collect_step.retry_step(cfg.collect, previous, task_input))
        _say_resumed(result.summary)
        repaired = result.summary.get("repaired") or {}
        err.print(
            f"retried {repaired.get('retried', 0)} failed run(s): {repaired.get('requests_sent', 0)} LLM "
            f"request(s) sent, {repaired.get('still_failed', 0)} still failed",
            highlight=False,
        )
    typer.echo(f"trajectories: {result.ref.uri}")
    summary = {k: v for k, v in result.summary.items() if k != "collect"}
    console.print_json(json.dumps(summary, default=str))


def _say_resumed(summary: dict[str, Any]) -> None:
    outcome = summary.get("collect") or {}
    if outcome.get("resumed"):
        err.print(
            f"resumed {outcome['resumed']} of {outcome['planned']} runs from checkpoints", highlight=False
        )


@app.command()
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
    result = _run(
        curate_step.step(cfg.curate, raw_input, _table(tasks, table, "coa tasks import")),
        execution=cfg.execution,
    )
    typer.echo(f"curated: {result.ref.uri}")
    typer.echo(f"report: {result.summary.get('report')}")
    typer.echo(result.summary.get("headline", ""))


@app.command()
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
    result = _run(convert_step.step(cfg.convert, curated_input, _table(tasks, table, "coa tasks import")))
    typer.echo(f"converted: {result.ref.uri}")
    typer.echo(json.dumps(result.summary))


@model_app.command("init")
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
    result = _run(student_step.step(student, _table(data, "sft", "coa convert")))
    folder = io.local_folder(result.ref, student_step.MODEL_FOLDER)
    card = json.loads(Path(folder, "coa_model.json").read_text())
    typer.echo(f"model: {result.ref.uri}")
    typer.echo(f"{card['n_params']:,} parameters, vocabulary {card['vocab_size']:,}; load from {folder}")


@app.command()
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
    result = _run(sft_step.step(cfg.sft, base, examples))
    s = result.summary
    typer.echo(f"model: {result.ref.uri}")
    typer.echo(
        f"{s['steps_run']} steps ({s['steps_planned']} planned), final loss {s['final_loss']}, "
        f"{s['tokens_per_s']:,.0f} tokens/s; loss curve {io.join(result.ref.uri, 'loss_curve.png')}"
    )


@app.command()
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
) -> None:
    """Agentic RL: GRPO/DAPO on multi-turn tool rollouts of the model; resumes after a crash or a kill."""
    import logging

    from coa.rl import step as rl_step

    cfg = _config(config, overrides, "rl")
    prompts = _table(data, "rl_prompts", "coa convert")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("coa.rl").setLevel(logging.INFO)
    judged = _table(evaluation, "eval", "coa evaluate") if evaluation is not None else None
    result = _run(rl_step.step(cfg.rl, _model(model), prompts, evaluation=judged))
    s = result.summary
    typer.echo(f"model: {result.ref.uri}")
    if s.get("family_choice"):
        choice = s["family_choice"]
        from coa.evaluate.metrics import percent_by_family

        typer.echo(
            f"family: {choice['family']} ({choice['rule']}; "
            f"held-out accuracy {percent_by_family(choice['accuracy'])})"
        )
    typer.echo(
        f"{s['steps_run']} steps ({s['steps_planned']} planned), {s['rollouts']:,} rollouts in "
        f"{s['train_runtime_s']:.0f} s, last reward {s['final_reward']}, entropy {s['final_entropy']}; "
        f"curves {io.join(result.ref.uri, 'rl_curves.png')}"
    )
    if s.get("heldout"):
        scores = ", ".join(f"{p['correct']:.0%} at step {p['step']:g}" for p in s["heldout"])
        typer.echo(f"held-out correct: {scores}")
    if s.get("learning_signal"):
        sig = s["learning_signal"]
        typer.echo(
            f"learning signal: {sig['correct_share']:.1%} of episodes correct; "
            f"{sig['groups_with_a_correct_episode']:,} of {sig['groups']:,} groups held a correct one, "
            f"{sig['mixed_groups']:,} mixed"
        )
    family_warning = (s.get("family_choice") or {}).get("warning")
    for message in (s.get("alarm"), family_warning, s.get("no_signal")):
        if message:
            err.print(f"[bold red]warning:[/] {message}", highlight=False)


@app.command()
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
) -> None:
    """Run a CoA model on tasks with the real tools; write eval.v1 and metrics.json, and print
    pass@1 ± its standard error, pass@k, maj@K, format-valid rate, tokens and tool calls per
    benchmark and per family. With --predictions, score prediction files instead (as `coa score`)."""
    from coa.evaluate import EvalConfig, format_metrics_table
    from coa.evaluate import step as eval_step
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
    result = _run(eval_step.step(eval_cfg, eval_tools(cfg), task_input, _model(model)))
    typer.echo(f"eval: {result.ref.uri}")
    typer.echo(format_metrics_table(result.summary["benchmarks"], "benchmark"))
    typer.echo("")
    typer.echo(format_metrics_table(result.summary["metrics"]))


def _register_score() -> None:
    from coa._cli.score import score

    app.command("score")(score)


_register_score()


@app.command("eval-report")
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
    typer.echo(result.summary["headline"])
    typer.echo(f"report: {result.summary['report']}")


@app.command("export")
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


# -- coa tool ----------------------------------------------------------------------------------


def _toolbox(config: Path, overrides: list[str] | None) -> Any:
    from coa.collect.config import CollectConfig
    from coa.tools.config import build_toolbox

    cfg = _config(config, overrides)
    tools = (cfg.collect or CollectConfig()).tools.model_copy(update={"record": "off"})
    return build_toolbox(tools, None)


def _run_tool(name: str, argument: str, config: Path, overrides: list[str] | None) -> None:
    import asyncio

    from coa.tools.sandbox import SandboxUnavailable

    try:
        box = _toolbox(config, overrides)
        if name not in box.tools:
            raise _fail(f"tool {name} is not enabled (collect.tools.enabled)")
        result = asyncio.run(box.call(name, argument))
    except (ConfigError, SandboxUnavailable) as e:
        raise _fail(str(e)) from None
    typer.echo(result.observation)
    if result.error:
        raise typer.Exit(1)


_CFG_OPT = typer.Option(
    "--config", "-c", help="YAML profile whose collect.tools section configures the tools"
)


@tool_app.command("code")
def tool_code(
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. collect.tools.code.wall_seconds=5")
    ] = None,
    config: Annotated[Path, _CFG_OPT] = Path("configs/demo.yaml"),
) -> None:
    """Run Python read from stdin in the sandbox (fenced ```python blocks or plain code)."""
    _run_tool("code", sys.stdin.read(), config, overrides)


@tool_app.command("search")
def tool_search(
    query: Annotated[str, typer.Argument(help="Search query")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides")] = None,
    config: Annotated[Path, _CFG_OPT] = Path("configs/demo.yaml"),
) -> None:
    """Search with the configured web_search provider (default: BM25 over the synthetic encyclopedia)."""
    _run_tool("web_search", query, config, overrides)


@tool_app.command("crawl")
def tool_crawl(
    url: Annotated[str, typer.Argument(help="URL (http(s), local://doc/<id>); several separated by ' | '")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides")] = None,
    config: Annotated[Path, _CFG_OPT] = Path("configs/demo.yaml"),
) -> None:
    """Fetch a page and print its readable text as the crawl_page observation."""
    _run_tool("crawl_page", url, config, overrides)


# -- coa format check ------------------------------------------------------------------------


def _format_rows(path: str) -> list[dict[str, Any]]:
    """Rows with ``id`` and ``text`` from a JSONL file or an sft.v1 artifact/Parquet file."""
    if path.endswith(".jsonl"):
        fs, p = io.filesystem(path)
        rows = []
        with fs.open(p, "rt", encoding="utf-8") as fh:
            for n, line in enumerate(fh):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    row = {"id": f"line-{n + 1}", "text": None, "_error": str(e)}
                rows.append(row if isinstance(row, dict) else {"id": f"line-{n + 1}", "text": None})
        return rows
    ref = io.lookup(path)
    table = io.read_table(ref) if ref is not None else io.read_parquet_file(path)
    if "text" in table.column_names:
        ids = table.column("id").to_pylist() if "id" in table.column_names else list(range(table.num_rows))
        return [{"id": i, "text": t} for i, t in zip(ids, table.column("text").to_pylist(), strict=True)]
    if "messages" in table.column_names:
        id_col = "example_id" if "example_id" in table.column_names else None
        out = []
        for n, row in enumerate(table.select([c for c in (id_col, "messages") if c]).to_pylist()):
            assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
            out.append({"id": row.get(id_col) if id_col else n, "text": assistant[-1] if assistant else None})
        return out
    raise io.ArtifactError(f"{path} has neither a 'text' nor a 'messages' column")


@format_app.command("check")
def format_check(
    path: Annotated[
        str, typer.Argument(help="JSONL with id/text per line, or an sft.v1 artifact / Parquet file")
    ],
    variant: Annotated[str, typer.Option(help="Grammar variant: web | mhqa | code_math | afm")],
    lenient: Annotated[bool, typer.Option(help="Accept non-canonical whitespace (model output)")] = False,
) -> None:
    """Validate every row; print one JSON line per row {"id", "ok", "error"}; exit 0 iff all valid."""
    from coa.format import check_rows

    try:
        rows = _format_rows(path)
        results = check_rows(rows, variant, strict=not lenient)
        all_ok = True
        for result in results:
            all_ok = all_ok and result["ok"]
            typer.echo(json.dumps(result, ensure_ascii=False, default=str))
    except (ValueError, OSError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    if not all_ok:
        raise typer.Exit(1)


# -- coa validate / show ---------------------------------------------------------------------


def _load_for_check(
    uri: str, schema_id: str | None
) -> list[tuple[str, schemas.Contract, pa.Table, list[str]]]:
    """(table name, contract, raw table, integrity problems) for an artifact folder or a Parquet file."""
    ref = io.lookup(uri)
    if ref is None:
        fs, path = io.filesystem(uri)
        if fs.isdir(path):
            raise io.ArtifactError(
                f"{uri} is a folder without a {io.MANIFEST} marker: not a committed artifact (never read)"
            )
        raw = io.read_parquet_file(uri)
        sid = schema_id or (raw.schema.metadata or {}).get(schemas.SCHEMA_ID_KEY, b"").decode()
        if not sid:
            raise io.ArtifactError(
                f"{uri} does not declare a schema id; pass --schema (one of {', '.join(schemas.ALL)})"
            )
        return [(posixpath.basename(uri), schemas.get(sid), raw, [])]
    out = []
    fs, path = io.filesystem(ref.uri)
    damaged = io.problems(ref)  # each file against the manifest's size and sha256
    for tname, info in ref.tables.items():
        problems = [f"{rel}: {damaged[rel]}" for rel in info.files if rel in damaged]
        parts = []
        for rel in info.files:
            try:
                with fs.open(posixpath.join(path, rel), "rb") as fh:
                    parts.append(pa.parquet.read_table(fh))
            except (OSError, pa.ArrowInvalid):
                if rel not in damaged:
                    raise
                # a truncated file does not parse: its integrity line says what is wrong
        contract = schemas.get(schema_id or info.schema_id)
        raw = pa.concat_tables(parts) if parts else contract.empty_table()
        out.append((tname, contract, raw, problems))
    in_tables = {rel for info in ref.tables.values() for rel in info.files}
    if out:  # damaged files outside the tables (a report, model weights) are reported too
        out[0][3].extend(f"{rel}: {why}" for rel, why in damaged.items() if rel not in in_tables)
    return out


@app.command()
def validate(
    uri: Annotated[str, typer.Argument(help="Artifact folder or Parquet file (local or s3://)")],
    schema: Annotated[
        str | None, typer.Option("--schema", help="Contract id, e.g. task.v1 (default: declared)")
    ] = None,
) -> None:
    """Check an artifact against its contract; print a per-column report; exit 1 on violation."""
    import pyarrow.parquet  # noqa: F401  (pa.parquet attribute)

    try:
        loaded = _load_for_check(uri, schema)
    except (io.ArtifactError, KeyError, OSError, pa.ArrowInvalid) as e:
        raise _fail(str(e)) from None
    ok = True
    for tname, contract, raw, problems in loaded:
        report = contract.check(raw)
        table = Table(title=f"{tname}: {contract.id}, {report.rows} rows")
        for col in ("column", "status", "detail"):
            table.add_column(col)
        for c in report.columns:
            style = "green" if c.ok else "bold red"
            table.add_row(c.column, f"[{style}]{c.status}[/]", c.detail)
        for p in problems:
            table.add_row("<integrity>", "[bold red]corrupt[/]", p)
        console.print(table)
        ok = ok and report.ok and not problems
    console.print("[green]valid[/]" if ok else "[bold red]contract violation[/]")
    if not ok:
        raise typer.Exit(1)


@app.command()
def show(
    uri: Annotated[str, typer.Argument(help="Artifact folder or Parquet file (local or s3://)")],
    table: Annotated[str | None, typer.Option("--table", "-t", help="Table to show (default: all)")] = None,
    rows: Annotated[int, typer.Option("--rows", "-n", help="Rows to print per table")] = 3,
) -> None:
    """Print schema, row count, lineage and a few rows of an artifact."""
    import pyarrow.parquet  # noqa: F401

    try:
        loaded = _load_for_check(uri, None)
        ref = io.lookup(uri)
        lineage = io.read_lineage(ref) if ref is not None else None
    except (io.ArtifactError, KeyError, OSError, pa.ArrowInvalid) as e:
        raise _fail(str(e)) from None
    if lineage is not None:
        console.rule("lineage")
        brief = {k: lineage[k] for k in ("kind", "name", "key", "content_hash", "code_version", "created_at")}
        brief["upstream"] = [u["uri"] for u in lineage.get("upstream", [])]
        console.print_json(json.dumps(brief, default=str))
    for tname, contract, raw, _ in loaded:
        if table and tname != table:
            continue
        console.rule(f"{tname}: {contract.id}, {raw.num_rows} rows")
        schema_table = Table(show_header=True)
        for col in ("column", "type", "doc"):
            schema_table.add_column(col)
        docs = schemas._contract.column_docs(contract)
        for field in raw.schema:
            schema_table.add_row(field.name, str(field.type), docs.get(field.name, "(not in contract)"))
        console.print(schema_table)
        for row in raw.slice(0, rows).to_pylist():
            console.print_json(_clip(row))


def _clip(row: dict[str, Any], limit: int = 300) -> str:
    def clip(v: Any) -> Any:
        if isinstance(v, str) and len(v) > limit:
            return v[:limit] + f"… (+{len(v) - limit} chars)"
        if isinstance(v, list):
            return [clip(x) for x in v[:10]] + ([f"… (+{len(v) - 10} items)"] if len(v) > 10 else [])
        if isinstance(v, dict):
            return {k: clip(x) for k, x in v.items()}
        return v

    return json.dumps(clip(row), default=str, ensure_ascii=False)


# -- coa models / coa lineage ------------------------------------------------------------------


@models_app.command("list")
def models_list() -> None:
    """Every registered model name with its champion and the number of history entries."""
    from coa.registry import Registry

    reg = Registry()
    table = Table(title=f"models in {reg.uri}")
    for col in ("name", "champion", "since", "entries"):
        table.add_column(col)
    for name in reg.names():
        current = reg.champion(name)
        table.add_row(
            name,
            current.model_uri if current else "-",
            current.since if current else "-",
            str(len(reg.history(name))),
        )
    console.print(table)


@models_app.command("show")
def models_show(name: Annotated[str, typer.Argument(help="Registered model name")]) -> None:
    """The champion of NAME, the champions before it, and every history entry with its reasons."""
    from coa.registry import Registry

    reg = Registry()
    current, history = reg.champion(name), reg.history(name)
    if current is None and not history:
        raise UserError(f"no model {name!r} in the registry ({', '.join(reg.names()) or 'empty'})")
    console.print(f"champion: {current.model_uri if current else '(none)'}", highlight=False)
    if current is not None:
        for uri, _ in reversed(current.previous):
            console.print(f"  before: {uri}", highlight=False)
    table = Table(title=f"history of {name}")
    for col in ("when", "event", "model", "reasons"):
        table.add_column(col)
    for e in history:
        table.add_row(e.at, e.event, e.model_uri, "\n".join(e.reasons))
    console.print(table)


@models_app.command("promote")
def models_promote(
    name: Annotated[str, typer.Argument(help="Registered model name")],
    model_uri: Annotated[
        str, typer.Argument(help="Model artifact URI (or folder / hub id) to make champion")
    ],
    reason: Annotated[str, typer.Option(help="Why (kept in the history)")] = "manual promotion",
) -> None:
    """Make MODEL_URI the champion of NAME by hand (no gate; the history records it)."""
    from coa.registry import Registry

    ref = io.lookup(model_uri)
    if ref is None and "://" in model_uri:
        raise UserError(f"no committed artifact at {model_uri}")
    if ref is not None and ref.kind != "model":
        raise UserError(f"{model_uri} is a {ref.kind} artifact, not a model")
    champion = Registry().promote(name, ref.uri if ref else model_uri, reasons=[reason])
    console.print(f"{name}: champion is now {champion.model_uri}", highlight=False)


@models_app.command("rollback")
def models_rollback(
    name: Annotated[str, typer.Argument(help="Registered model name")],
    reason: Annotated[str, typer.Option(help="Why (kept in the history)")] = "manual rollback",
) -> None:
    """Restore the champion NAME had before the current one."""
    from coa.registry import Registry

    champion = Registry().rollback(name, reason)
    console.print(f"{name}: champion restored to {champion.model_uri}", highlight=False)


@models_app.command("export")
def models_export(
    model: Annotated[str, typer.Argument(help="Model artifact URI or champion:NAME (the registry)")],
    out: Annotated[Path, typer.Argument(help="New folder: weights, tokenizer and a model card README.md")],
    license_id: Annotated[
        str | None,
        typer.Option(
            "--license", help="License id for the card (default: apache-2.0, or other on a hub base)"
        ),
    ] = None,
) -> None:
    """A Hugging Face model folder with a model card (from_pretrained and push_to_hub take it as is)."""
    from coa.registry.export import export_model

    result = export_model(model, str(out), license_id)
    console.print(f"{result.model_uri} -> {result.out} ({', '.join(result.files)})", highlight=False)
    if result.evaluation is None:
        err.print("note: no evaluation artifact of this model was found; the card has no benchmark figures")


@app.command()
def lineage(
    uri: Annotated[str, typer.Argument(help="Any committed artifact (model, eval, report…), local or s3://")],
    html: Annotated[
        str | None, typer.Option("--html", help="Also write a page with a picture of the DAG")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the graph as JSON instead of a tree")
    ] = False,
) -> None:
    """The lineage graph of an artifact back to its task sources, configs and code versions."""
    from coa.lineage import format_tree, trace, write_html

    graph = trace(uri)
    if as_json:
        typer.echo(json.dumps(graph.to_dict(), indent=2, default=str))
    else:
        typer.echo(format_tree(graph))
    if html:
        err.print(f"lineage page: {write_html(graph, html)}", highlight=False)


async def _prefect_secret_block(name: str) -> Any:
    """An endpoint's ``api_key_block``, read as a Prefect Secret block by the Prefect layer (loaded only
    when a command reads one: the domain library reads environment variables only)."""
    from tasks.secret_blocks import read_secret_block

    return await read_secret_block(name)


def main() -> None:
    from coa.llm.secrets import set_secret_block_reader

    set_secret_block_reader(_prefect_secret_block)
    app()


if __name__ == "__main__":
    main()
