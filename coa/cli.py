"""The ``coa`` command line: run the pipeline, import task sets, inspect and validate artifacts.

Every command has ``--help``. Exit codes: 0 success, 1 a check failed (e.g. a contract violation),
2 bad input or usage (unreadable file, bad config).
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

import schemas
from coa import io
from coa.config import ConfigError, Family, TaskSourceConfig
from coa.version import code_version

app = typer.Typer(help="coa-pipeline: a factory for Chain-of-Agents agent models.", no_args_is_help=True)
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
console = Console()
err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


# -- coa run ---------------------------------------------------------------------------------


@app.command(context_settings={"allow_extra_args": False})
def run(
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Dotted key=value overrides, e.g. tasks.name=x")
    ] = None,
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML profile")] = Path("configs/demo.yaml"),
) -> None:
    """Run the pipeline flow (Prefect) on a config profile with optional overrides."""
    from coa.config import load_config

    try:
        load_config(config, overrides or [])  # fail fast, before Prefect starts
    except ConfigError as e:
        raise _fail(str(e)) from None
    from flows.pipeline import pipeline

    result = pipeline(config_path=str(config), overrides=list(overrides or []))
    _print_stage_table(result["stages"])
    if result.get("comparison"):
        from coa.report import format_comparison

        typer.echo("\nstudent on held-out tasks, before and after SFT, beside the teacher:")
        typer.echo(format_comparison(result["comparison"]))  # plain: a rich console would wrap it
    if result.get("report"):
        console.print(f"curation report: {result['report']}")
    if result.get("training_report"):
        console.print(f"training report: {result['training_report']}")


def _print_stage_table(stages: list[dict[str, Any]]) -> None:
    table = Table(title="pipeline stages")
    for col in ("stage", "status", "rows", "artifact"):
        table.add_column(col)
    for s in stages:
        table.add_row(s["stage"], s["status"], str(s.get("rows", "")), s.get("artifact") or s.get("note", ""))
    console.print(table)


# -- coa tasks import ------------------------------------------------------------------------


@tasks_app.command("import")
def tasks_import(
    sources: Annotated[
        list[str], typer.Argument(help="Task files (.json/.jsonl/.parquet) or datasets folders")
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="Artifact folder to write (local path or s3://)")],
    family: Annotated[
        str | None, typer.Option(help="Family for plain question/answer files: web|mhqa|math|code")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Source name for task ids (only with one SRC)")] = None,
    limit: Annotated[int | None, typer.Option(help="Keep the first N usable rows of each source")] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing artifact built from other inputs")] = False,
) -> None:
    """Import task sets into a task.v1 artifact (+ a quarantine of unusable rows)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from coa.tasksets import TaskImportError, import_tasks

    if name and len(sources) > 1:
        raise _fail("--name applies to a single source; give one SRC or set names in a config file")
    if family is not None and family not in ("web", "mhqa", "math", "code"):
        raise _fail(f"--family must be one of web, mhqa, math, code (got {family!r})")
    fam: Family | None = family  # type: ignore[assignment]
    cfgs = [TaskSourceConfig(path=s, name=name, family=fam, limit=limit) for s in sources]
    try:
        fingerprints = [io.path_fingerprint(c.path) for c in cfgs]
    except FileNotFoundError as e:
        raise _fail(str(e)) from None
    config = {"sources": [c.model_dump(mode="json") for c in cfgs], "inputs": fingerprints}
    key = io.artifact_key("tasks", "import", config, [], code_version())
    writer = io.ArtifactWriter(out, "tasks", name or "import", key, config=config)
    existing = writer.existing()
    if existing is not None:
        if existing.key == key:
            console.print(f"up to date: {existing.uri} ({existing.rows('tasks')} tasks), nothing to do")
            return
        if not force:
            raise _fail(
                f"{out} already holds a committed artifact built from other inputs; pass --force to replace"
            )
        fs, path = io.filesystem(out)
        fs.rm(path, recursive=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=err) as bar:
        bars: dict[str, Any] = {}

        def progress(src: str, done: int, total: int) -> None:
            if src not in bars:
                bars[src] = bar.add_task(src, total=total)
            bar.update(bars[src], completed=done, total=total)

        try:
            result = import_tasks(cfgs, progress=progress)
        except TaskImportError as e:
            raise _fail(str(e)) from None
    writer.extra_lineage["sources"] = [s.__dict__ for s in result.sources]
    writer.write_table("tasks", result.tasks, schemas.TASK)
    writer.write_table("quarantine", result.quarantine, schemas.QUARANTINE)
    ref = writer.commit()
    table = Table(title=f"imported into {ref.uri}")
    for col in ("source", "layout", "read", "ok", "quarantined"):
        table.add_column(col)
    for s in result.sources:
        table.add_row(s.name, s.layout, str(s.rows_read), str(s.rows_ok), str(s.rows_quarantined))
    console.print(table)
    if result.quarantine.num_rows:
        console.print(
            f"{result.quarantine.num_rows} row(s) quarantined; see `coa show {ref.uri} --table quarantine`"
        )


@tasks_app.command("synthetic")
def tasks_synthetic(
    out: Annotated[str, typer.Option("--out", "-o", help="Artifact folder to write (tables train, heldout)")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. synthetic.train.multihop=50")
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with a synthetic section")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Generate the built-in synthetic task families (train + held-out) into a task.v1 artifact."""
    from coa.config import load_config
    from coa.synthetic import generate_all

    try:
        cfg = load_config(config, overrides or [])
    except ConfigError as e:
        raise _fail(str(e)) from None
    if cfg.synthetic is None:
        raise _fail(f"{config} has no synthetic section")
    settings = cfg.synthetic.model_dump(mode="json")
    writer = io.ArtifactWriter(
        out,
        "tasks",
        "synthetic",
        io.artifact_key("tasks", "synthetic", settings, [], code_version()),
        settings,
    )
    existing = writer.existing()
    if existing is not None:
        if existing.key == writer.key:
            console.print(f"up to date: {existing.uri}")
            return
        raise _fail(f"{out} already holds other tasks; choose another --out")
    tables = generate_all(cfg.synthetic)
    for split in ("train", "heldout"):
        writer.write_table(split, tables[split], schemas.TASK)
    ref = writer.commit()
    console.print(f"{ref.rows('train')} train and {ref.rows('heldout')} held-out tasks -> {ref.uri}")


# -- coa collect -----------------------------------------------------------------------------


@app.command()
def collect(
    tasks: Annotated[str, typer.Option("--tasks", help="task.v1 artifact to solve")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. collect.concurrency=8")
    ] = None,
    table: Annotated[str | None, typer.Option(help="Table of the task artifact (default: its first)")] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with a collect section")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Run the multi-agent teacher on every task; checkpointed, resumable after a crash or a kill."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from coa.collect import CollectionIncomplete, run_collect_stage
    from coa.config import load_config

    try:
        cfg = load_config(config, overrides or [])
        ref = io.open_artifact(tasks)
    except (ConfigError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    if cfg.collect is None:
        raise _fail(f"{config} has no collect section")
    store = io.Store()
    columns = (TextColumn("collect"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err) as bar:
        job = bar.add_task("collect", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)

        try:
            out, summary = run_collect_stage(cfg.collect, ref, table or ref.primary_table, store, progress)
        except CollectionIncomplete as e:
            raise _fail(str(e), code=1) from None
    typer.echo(f"trajectories: {out.uri}")
    console.print_json(json.dumps(summary, default=str))


@app.command()
def curate(
    raw: Annotated[str, typer.Option("--raw", help="trajectory.v1 artifact from `coa collect`")],
    tasks: Annotated[str, typer.Option("--tasks", help="task.v1 artifact the runs solved (code tests)")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. curate.filters.max_tool_calls=20")
    ] = None,
    table: Annotated[str | None, typer.Option(help="Table of the task artifact (default: its first)")] = None,
    config: Annotated[Path, typer.Option("--config", "-c", help="YAML profile with a curate section")] = Path(
        "configs/demo.yaml"
    ),
) -> None:
    """Filter, deduplicate, decontaminate and gate raw trajectories; writes the HTML report."""
    from coa.config import load_config
    from coa.curate.runner import report_uri, run_curate_stage
    from coa.curate.stage import CurateGateError

    try:
        cfg = load_config(config, overrides or [])
        raw_ref, tasks_ref = io.open_artifact(raw), io.open_artifact(tasks)
    except (ConfigError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    if cfg.curate is None:
        raise _fail(f"{config} has no curate section")
    try:
        ref, result = run_curate_stage(
            cfg.curate, raw_ref, tasks_ref, table or tasks_ref.primary_table, io.Store()
        )
    except CurateGateError as e:
        raise _fail(str(e), code=1) from None
    typer.echo(f"curated: {ref.uri}")
    typer.echo(f"report: {report_uri(ref)}")
    if result is not None:
        typer.echo(result.headline)


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
    from coa.config import load_config
    from coa.convert.stage import run_convert_stage

    try:
        cfg = load_config(config, overrides or [])
        curated_ref, tasks_ref = io.open_artifact(curated), io.open_artifact(tasks)
    except (ConfigError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    if cfg.convert is None:
        raise _fail(f"{config} has no convert section")
    ref, counts = run_convert_stage(
        cfg.convert, curated_ref, tasks_ref, table or tasks_ref.primary_table, io.Store()
    )
    typer.echo(f"converted: {ref.uri}")
    typer.echo(json.dumps(counts))


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
    from coa.config import load_config
    from coa.train.stage import StudentConfig, run_student_stage

    try:
        cfg = load_config(config, overrides or [])
        data_ref = io.open_artifact(data)
    except (ConfigError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    student = cfg.student or StudentConfig()
    if student.base is not None:
        raise _fail(f"student.base is {student.base!r}: nothing to build (unset it to build the tiny model)")
    built = run_student_stage(student, data_ref, io.Store())
    card = json.loads(Path(built.path, "coa_model.json").read_text())
    typer.echo(f"model: {built.ref.uri}")
    typer.echo(f"{card['n_params']:,} parameters, vocabulary {card['vocab_size']:,}; load from {built.path}")


@app.command()
def sft(
    data: Annotated[str, typer.Option("--data", help="Artifact from `coa convert` (its sft table)")],
    model: Annotated[
        str | None,
        typer.Option("--model", help="Base model: folder, hub id or model artifact (default: the config's)"),
    ] = None,
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides, e.g. sft.max_steps=200")] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with student and sft sections")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Fine-tune the student on CoA examples (observations masked); resumes after a crash or a kill."""
    import logging

    from coa.config import load_config
    from coa.train import SFTError
    from coa.train.stage import StudentConfig, StudentModel, run_sft_stage, run_student_stage

    try:
        cfg = load_config(config, overrides or [])
        data_ref = io.open_artifact(data)
    except (ConfigError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    if cfg.sft is None:
        raise _fail(f"{config} has no sft section")
    store = io.Store()
    if model is None:
        base = run_student_stage(cfg.student or StudentConfig(), data_ref, store)
    elif io.lookup(model) is not None:
        base = StudentModel(str(io.local_folder(model, "model")), io.open_artifact(model))
    else:
        base = StudentModel(model)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("coa.train.sft").setLevel(logging.INFO)
    try:
        ref, result = run_sft_stage(cfg.sft, base, data_ref, store)
    except SFTError as e:
        raise _fail(str(e), code=1) from None
    typer.echo(f"model: {ref.uri}")
    typer.echo(
        f"{result.global_step} steps ({result.steps_planned} planned), final loss {result.final_loss}, "
        f"{result.tokens_per_s:,.0f} tokens/s; loss curve {io.join(ref.uri, 'loss_curve.png')}"
    )


@app.command()
def evaluate(
    model: Annotated[str, typer.Option("--model", help="Model folder, hub id or model artifact to evaluate")],
    tasks: Annotated[str, typer.Option("--tasks", help="task.v1 artifact (e.g. from `coa tasks synthetic`)")],
    table: Annotated[str, typer.Option(help="Table of the task artifact")] = "heldout",
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. evaluate.limit_per_family=20")
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", "-c", help="YAML profile with an evaluate section")
    ] = Path("configs/demo.yaml"),
) -> None:
    """Run a CoA model on tasks with the real tools; write eval.v1 and print format-valid rate,
    accuracy, tokens and tool calls per family."""
    from coa.config import load_config
    from coa.evaluate import EvalConfig, format_metrics_table, run_evaluate_stage
    from coa.teacher import ToolsConfig

    try:
        cfg = load_config(config, overrides or [])
        tasks_ref = io.open_artifact(tasks)
    except (ConfigError, io.ArtifactError) as e:
        raise _fail(str(e)) from None
    eval_cfg = cfg.evaluate or EvalConfig()
    tools = eval_cfg.tools or (cfg.collect.tools if cfg.collect else ToolsConfig())
    model_ref = io.lookup(model)
    path = str(io.local_folder(model_ref, "model")) if model_ref is not None else model
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("evaluate"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        job = bar.add_task("evaluate", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)

        try:
            ref, metrics = run_evaluate_stage(
                eval_cfg, tasks_ref, table, path, model_ref, tools, io.Store(), progress
            )
        except (RuntimeError, OSError) as e:
            raise _fail(str(e), code=1) from None
    typer.echo(f"eval: {ref.uri}")
    typer.echo(format_metrics_table(metrics))


@app.command("export")
def export_cmd(
    uri: Annotated[str, typer.Argument(help="Artifact from `coa convert`")],
    out: Annotated[str, typer.Argument(help="Output file (afm-sft: .json, afm-rl: .parquet) or folder (hf)")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="afm-sft | afm-rl | hf")] = "hf",
) -> None:
    """Export converted data: AFM alpaca SFT JSON, AFM RL Parquet, or a `datasets`-loadable folder."""
    from coa.convert.export import export

    try:
        typer.echo(export(uri, fmt, out))
    except (ValueError, io.ArtifactError) as e:
        raise _fail(str(e)) from None


# -- coa tool ----------------------------------------------------------------------------------


def _toolbox(config: Path, overrides: list[str] | None) -> Any:
    from coa.config import load_config
    from coa.teacher import CollectConfig, build_toolbox

    cfg = load_config(config, overrides or [])
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
    manifest = json.loads(fs.cat_file(posixpath.join(path, io.MANIFEST)))
    for tname, info in ref.tables.items():
        problems = []
        parts = []
        for rel in info.files:
            full = posixpath.join(path, rel)
            digest = io._sha256(fs, full)
            if digest != manifest["files"].get(rel):
                problems.append(f"{rel}: content hash differs from the manifest (file changed after commit)")
            with fs.open(full, "rb") as fh:
                parts.append(pa.parquet.read_table(fh))
        contract = schemas.get(schema_id or info.schema_id)
        raw = pa.concat_tables(parts) if parts else contract.empty_table()
        out.append((tname, contract, raw, problems))
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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
