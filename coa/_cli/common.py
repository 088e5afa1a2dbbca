"""What every command module shares: the consoles, one-line failures, the profile with overrides, a
table or a model named on the command line, and running a step with a progress bar (:func:`_run`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from coa import io
from coa.errors import CoaError, InfraError, UserError

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


def _model_input(value: str, option: str = "--model") -> Any:
    """A ``--model`` value (a registry name already resolved) as a :class:`~coa.steps.ModelInput`,
    refused in one line when it names no model: a missing folder, an artifact of another kind, a hub
    id that is not in the local cache while offline (``option``: the option it was given by)."""
    import os

    from coa.steps import ModelInput

    hint = "give a model folder, a model artifact (`coa sft` / `coa rl`), a hub id or champion:NAME"
    ref = io.lookup(value)
    if ref is not None:
        if ref.kind != "model":
            given = _KIND_NAMES.get(ref.kind, ref.kind)
            raise UserError(f"{option} {value} is a {given} artifact (kind {ref.kind}), not a model: {hint}")
        return ModelInput(ref=ref)
    local = "://" in value or value.startswith(("/", ".", "~")) or os.path.exists(value)
    fs, path = io.filesystem(value) if "://" in value else (None, os.path.expanduser(value))
    if local and not (fs.exists(path) if fs is not None else os.path.isdir(path)):
        raise UserError(f"{option} {value}: no such model folder: {hint}")
    if not local and os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        from huggingface_hub import snapshot_download

        try:
            snapshot_download(value, local_files_only=True)
        except Exception:  # noqa: BLE001 - any failure means: not usable offline
            raise UserError(
                f"{option} {value}: not a folder, and no hub model of that id is in the local cache "
                f"(HF_HUB_OFFLINE is set): {hint}"
            ) from None
    elif not local:
        check_hub(value)
    return ModelInput.parse(value)


def check_hub(model_id: str, timeout_s: float = 3.0) -> None:
    """A hub model id that is not in the local cache needs the hub: refuse it in one line (exit 3)
    when the hub does not answer, instead of a long retry and a traceback from ``from_pretrained``."""
    import socket
    import urllib.parse

    from huggingface_hub import constants, snapshot_download

    try:
        snapshot_download(model_id, local_files_only=True)
        return  # cached: no network needed
    except Exception:  # noqa: BLE001 - not (fully) cached: the hub must answer
        pass
    url = urllib.parse.urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout_s).close()
    except OSError as e:
        raise hub_unreachable(model_id, f"{constants.ENDPOINT}: {e}") from None


def hub_unreachable(model_id: str | None, why: str) -> InfraError:
    """The one-line error for a hub model that is neither cached nor downloadable here."""
    named = f"model {model_id}" if model_id else "a hub model"
    fetch = f"`hf download {model_id}`" if model_id else "`hf download <id>`"
    return InfraError(
        f"{named}: not in the local Hugging Face cache and the hub is unreachable ({why}); download it "
        f"where there is network ({fetch}, then set HF_HUB_OFFLINE=1) or give a local model folder"
    )


def _model(value: str, option: str = "--model") -> Any:
    """A model named on the command line (by ``option``): ``champion:NAME`` (resolved through the
    registry), a committed model artifact URI, else a folder or hub id."""
    if value.startswith(CHAMPION_PREFIX):
        from coa.registry.store import Registry

        value = Registry().resolve(value.removeprefix(CHAMPION_PREFIX))
    return _model_input(value, option)


def _run(step: Any, label: str | None = None, execution: Any = None) -> Any:
    """Run a step with a progress bar on stderr; print whether it was reused.

    ``execution`` (the profile's ``execution`` section): with ``engine: ray`` the step's shards run on
    Ray through the orchestration skin (:mod:`tasks.fanout`, loaded only then)."""
    import contextlib

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from coa.steps import run_step
    from coa.view.commit import commit_page

    columns = (
        TextColumn(label or step.name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("~"), TimeRemainingColumn(), TextColumn("{task.fields[figures]}"),
    )  # fmt: skip
    shards: Any = contextlib.nullcontext(None)
    if execution is not None and execution.engine != "local":
        from tasks.fanout import executor as fanout_executor

        shards = fanout_executor(execution)
    with shards as executor, Progress(*columns, console=err, transient=True) as bar:
        job = bar.add_task(step.name, total=None, figures="")
        progress = BarProgress(bar, job)
        try:
            result = run_step(step, io.Store(), progress=progress, executor=executor, finish=commit_page)
        except KeyboardInterrupt:
            raise _fail(f"interrupted: {_saved(step)}", 130) from None
    verb = "reused committed artifact" if result.reused else "built"
    err.print(f"{step.name}: {verb} {result.ref.uri}", highlight=False)
    return result


class BarProgress:
    """The CLI's progress bar as a step's :class:`~coa.progress.LiveMetrics`: done of planned, elapsed,
    time left, and the live figures (loss or reward, tokens/s) the Prefect progress artifact shows."""

    def __init__(self, bar: Any, job: Any) -> None:
        self.bar, self.job = bar, job
        self.figures: dict[str, float] = {}

    def __call__(self, done: int, total: int) -> None:
        self.bar.update(self.job, completed=done, total=total)

    def metrics(self, values: Mapping[str, float]) -> None:
        from coa.progress import figures_text

        self.figures.update(values)
        self.bar.update(self.job, figures=figures_text(self.figures))


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
