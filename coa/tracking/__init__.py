"""Experiment tracking: one tracker run per built step, through the trainers' own integrations.

The pipeline's ``tracking:`` section (:class:`~coa.tracking.config.TrackingConfig`) is made the
process's active config with :func:`activate` (an environment variable, so trainer subprocesses
and shard workers see it too). :func:`step_run` wraps a step's build: it opens the tracker run
(named by the step and its content key, tagged with the artifact URI and the upstream URIs) and
points the trainers' ``report_to`` integrations at it through their environment variables (MLflow's
``MLFLOW_RUN_ID``, ``TENSORBOARD_LOGGING_DIR``, ``WANDB_*``); :func:`log_summary` then logs the
step's summary (evaluation metrics, curation gate results and row counts) to the same run, and
:meth:`TrackerRun.lineage` is what the artifact's lineage records about it.

``none`` (the default) opens nothing, sets nothing and writes nothing. Nothing secret is logged:
tags and text pass :func:`coa.settings.scrub`, and no environment value is logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from coa.errors import InfraError
from coa.settings import scrub
from coa.tracking.config import Backend, TrackingConfig

log = logging.getLogger(__name__)

ENV = "COA_TRACKING"
"""The active tracking config (its JSON); unset: ``backend: none``."""

RUN_ENV = "COA_TRACKING_RUN"
"""The name of the tracker run :func:`step_run` opened: the trainers name their run with it."""

PACKAGES: dict[str, tuple[str, str]] = {
    "mlflow": ("mlflow", "mlflow-skinny==3.17.2"),
    "tensorboard": ("tensorboard", "tensorboard==2.21.0"),
    "wandb": ("wandb", "wandb"),
    "trackio": ("trackio", "trackio==0.43.0"),
}
"""backend → (module it needs, what to pip install)."""


QUICK = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
"""A tracker that is down costs seconds, not MLflow's default minutes of retries."""


class TrackingUnavailable(InfraError):
    """The chosen tracker's package is not installed (exit 3)."""


def current() -> TrackingConfig:
    """The active tracking config (``backend: none`` when none was activated)."""
    raw = os.environ.get(ENV)
    return TrackingConfig.model_validate_json(raw) if raw else TrackingConfig()


@contextlib.contextmanager
def activate(config: TrackingConfig | None) -> Iterator[TrackingConfig]:
    """Make ``config`` the active tracking config for the block (and the subprocesses it starts)."""
    config = config or TrackingConfig()
    with _environ({ENV: config.model_dump_json() if config.backend != "none" else None}):
        yield config


def for_dispatch() -> dict[str, Any] | None:
    """The active tracking config as a dispatched step's parameter (None when nothing is tracked).

    A ``uri`` with credentials in it is left out (the worker then reads ``MLFLOW_TRACKING_URI`` from its
    own environment): flow-run parameters are shown in the Prefect UI, and secrets never reach it."""
    config = current()
    if config.backend == "none":
        return None
    if config.uri and re.search(r"//[^/@]*@", config.uri):
        config = config.model_copy(update={"uri": None})
    return json.loads(config.model_dump_json())


def use(config: TrackingConfig | None) -> None:
    """Make ``config`` the active tracking config for the rest of this process (a CLI command)."""
    if config is None or config.backend == "none":
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = config.model_dump_json()


def require(backend: Backend) -> None:
    """Raise :class:`TrackingUnavailable`, naming the pip command, when ``backend``'s package is missing."""
    if backend == "none":
        return
    module, package = PACKAGES[backend]
    if importlib.util.find_spec(module) is None:
        raise TrackingUnavailable(
            f"tracking.backend is {backend} but the {module!r} package is not installed: "
            f"pip install '{package}' (or set tracking.backend: none)"
        )


def report_to(config: TrackingConfig) -> list[str] | str:
    """The ``report_to`` of a trainer's ``TrainingArguments``: ``"none"`` or ``[backend]``."""
    return "none" if config.backend == "none" else [config.backend]


def log_dir(config: TrackingConfig, root: str | None) -> Path | None:
    """Where TensorBoard / W&B / Trackio write locally: ``log_dir``, else ``<root>/tracking/<backend>``."""
    if config.backend in ("none", "mlflow"):
        return None
    if config.log_dir:
        return Path(config.log_dir).expanduser()
    if root is None or "://" in root and not root.startswith("file://"):
        raise TrackingUnavailable(
            f"tracking.backend is {config.backend} and the storage root {root!r} is not a local folder: "
            "set tracking.log_dir to a local folder"
        )
    return Path(root.removeprefix("file://")) / "tracking" / config.backend


@dataclasses.dataclass(frozen=True)
class TrackerRun:
    """A tracker run opened for one step."""

    backend: Backend
    name: str
    run_id: str | None
    """MLflow run id; None for trackers whose run the trainer names itself."""
    location: str
    """Where the run lives: the MLflow tracking URI, or the local log folder."""
    experiment: str
    tags: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The run's tags (:func:`tags_of`), for trackers whose run gets them with the summary."""

    def lineage(self) -> dict[str, Any]:
        """What the artifact's lineage records about the run (no secrets: the URI is scrubbed)."""
        return {
            "backend": self.backend,
            "name": self.name,
            "run_id": self.run_id,
            "location": _safe_uri(self.location),
            "experiment": self.experiment,
        }


def run_name(step: str, artifact_folder: str) -> str:
    """A run's name: the step and its artifact's folder (``<artifact>-<content key>``)."""
    return f"{step}/{artifact_folder}"


def tags_of(artifact_uri: str, upstream: Sequence[str], step: str) -> dict[str, str]:
    """The tags of every run: the artifact URI, its upstream URIs, the step."""
    tags = {"coa.step": step, "coa.artifact_uri": _safe_uri(artifact_uri)}
    for i, uri in enumerate(upstream):
        tags[f"coa.upstream.{i}"] = _safe_uri(uri)
    return tags


@contextlib.contextmanager
def step_run(
    step: str, artifact_uri: str, upstream: Sequence[str], root: str | None
) -> Iterator[TrackerRun | None]:
    """Open the tracker run of one step's build and point the trainers' integrations at it.

    Yields None with ``backend: none`` (nothing is opened, set or written). A build that raises
    marks an MLflow run FAILED.
    """
    config = current()
    if config.backend == "none":
        yield None
        return
    require(config.backend)
    name = run_name(step, artifact_uri.rstrip("/").rsplit("/", 1)[-1])
    tags = tags_of(artifact_uri, upstream, step)
    if config.backend == "mlflow":
        client, uri = mlflow_client(config)
        try:
            with _environ(QUICK):
                run = client.create_run(experiment_id(client, config.experiment), run_name=name, tags=tags)
        except Exception as e:
            raise TrackingUnavailable(
                f"MLflow tracking server {_safe_uri(uri)} did not take the run of {step} "
                f"({type(e).__name__}): start it, fix tracking.uri, or set tracking.backend: none"
            ) from e
        tracker = TrackerRun("mlflow", name, run.info.run_id, uri, config.experiment)
        env: dict[str, str | None] = {
            "MLFLOW_TRACKING_URI": uri,
            "MLFLOW_EXPERIMENT_NAME": config.experiment,
            "MLFLOW_RUN_ID": run.info.run_id,
        }
        try:
            with _environ(env):
                yield tracker
        except BaseException:
            client.set_terminated(run.info.run_id, status="FAILED")
            raise
        client.set_terminated(run.info.run_id, status="FINISHED")
        return
    folder = log_dir(config, root)
    assert folder is not None
    run_dir = folder / name.replace("/", "__")
    tracker = TrackerRun(config.backend, name, None, str(run_dir), config.experiment)
    env = {"TENSORBOARD_LOGGING_DIR": str(run_dir)} if config.backend == "tensorboard" else {}
    if config.backend == "wandb":
        env = {
            "WANDB_MODE": config.wandb_mode,
            "WANDB_PROJECT": config.experiment,
            "WANDB_DIR": str(run_dir),  # the run's own folder: the lineage's location finds it
            "WANDB_NOTES": json.dumps(tags, sort_keys=True),  # W&B tags are short labels: URIs in notes
        }
    if config.backend == "trackio":
        # one local store (SQLite) per project under the folder; every step's run is named in it
        tracker = TrackerRun("trackio", name, None, str(folder), config.experiment, tags)
        folder.mkdir(parents=True, exist_ok=True)
        _check_trackio_dir(folder)
        env = {"TRACKIO_DIR": str(folder)}
    if config.backend == "wandb":
        run_dir.mkdir(parents=True, exist_ok=True)
    with _environ({**env, RUN_ENV: name}):
        try:
            yield tracker
        finally:
            if config.backend == "wandb":
                _finish_wandb()  # the trainers' callback leaves its run open: the next step would log into it


def _finish_wandb() -> None:
    """Close the W&B run a trainer's callback opened (its summary and history are written then)."""
    import sys

    wandb = sys.modules.get("wandb")  # imported by the trainer's callback if it ran at all
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def log_summary(run: TrackerRun | None, summary: Mapping[str, Any]) -> None:
    """Log a step's summary to its run: numeric leaves as metrics, the headline as a tag.

    MLflow, TensorBoard and Trackio (W&B gets the trainers' curves through ``report_to`` only).
    """
    if run is None:
        return
    metrics = metric_items(summary)
    if run.backend == "mlflow" and run.run_id:
        from mlflow.entities import Metric, RunTag

        client, _ = mlflow_client(current(), run.location)
        stamp = _now_ms()
        items = [Metric(k, v, stamp, 0) for k, v in metrics.items()]
        text = [RunTag(f"coa.{k}", scrub(str(v))[:4000]) for k, v in summary.items() if isinstance(v, str)]
        for i in range(0, len(items), 500):
            client.log_batch(run.run_id, metrics=items[i : i + 500])
        if text:
            client.log_batch(run.run_id, tags=text)
    elif run.backend == "tensorboard" and metrics:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=run.location)
        try:
            for k, v in metrics.items():
                writer.add_scalar(k, v, 0)
        finally:
            writer.close()
    elif run.backend == "trackio":
        _log_trackio(run, summary, metrics)


def _check_trackio_dir(folder: Path) -> None:
    """Refuse a folder other than the one this process's Trackio already writes to.

    Trackio reads ``TRACKIO_DIR`` once, when it is imported: a run in a process that imported it for
    another folder would land there, not where the lineage says."""
    import sys

    utils = sys.modules.get("trackio.utils")
    bound = getattr(utils, "TRACKIO_DIR", None)
    if bound is not None and Path(bound).resolve() != folder.resolve():
        raise TrackingUnavailable(
            f"trackio in this process already writes to {bound} (it reads TRACKIO_DIR once, at import), "
            f"not to {folder}: use one tracking.log_dir per process"
        )


def _log_trackio(run: TrackerRun, summary: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
    """Add a step's summary to its Trackio run (created here when no trainer opened it): the metrics
    as one logged point; the run's tags and the summary's text in its config, secrets masked.

    Trackio replaces a resumed run's config with the one given, so what the trainer put there is
    read back and kept (and masked too)."""
    import io as _io

    import trackio

    from coa.settings import redact

    folder = Path(run.location)
    _check_trackio_dir(folder)
    kept: dict[str, Any] = {}
    with _environ({"TRACKIO_DIR": str(folder)}), contextlib.redirect_stdout(_io.StringIO()) as said:
        try:
            earlier = [r for r in trackio.Api().runs(run.experiment) if r.name == run.name]
        except ValueError:  # no such project yet: this is its first run
            earlier = []
        if earlier:
            kept = {k: v for k, v in (earlier[-1].config or {}).items() if not str(k).startswith("_")}
        text = {f"coa.{k}": str(v)[:4000] for k, v in summary.items() if isinstance(v, str)}
        config = redact({**kept, **run.tags, **text})
        trackio.init(
            project=run.experiment, name=run.name, resume="allow", config=config, embed=False,
            auto_log_gpu=False, auto_log_cpu=False,
        )  # fmt: skip
        try:
            trackio.log(dict(metrics))
        finally:
            trackio.finish()
    log.debug("trackio: %s", said.getvalue().strip())


def metric_items(summary: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested summary as ``a/b/c`` → value (``pass@1`` → ``pass_at_1``)."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        if key == "config":
            continue
        name = f"{prefix}{_metric_name(str(key))}"
        if isinstance(value, Mapping):
            out.update(metric_items(value, name + "/"))
        elif isinstance(value, bool) or isinstance(value, int | float) and math.isfinite(float(value)):
            out[name] = float(value)
    return out


def mlflow_client(config: TrackingConfig, uri: str | None = None) -> tuple[Any, str]:
    """An MLflow client and the tracking URI it talks to (config, else ``MLFLOW_TRACKING_URI``)."""
    from mlflow import MlflowClient

    uri = uri or config.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise TrackingUnavailable(
            "tracking.backend is mlflow but no tracking URI is set: set tracking.uri or MLFLOW_TRACKING_URI"
        )
    return MlflowClient(tracking_uri=uri, registry_uri=uri), uri


def experiment_id(client: Any, name: str) -> str:
    """The id of experiment ``name``, created when missing."""
    found = client.get_experiment_by_name(name)
    return str(found.experiment_id) if found is not None else str(client.create_experiment(name))


def _metric_name(key: str) -> str:
    return re.sub(r"[^\w.\- :/]", "_", key.replace("@", "_at_"))


_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def _safe_uri(uri: str) -> str:
    """``uri`` without user:password@ and with secret environment values masked."""
    return scrub(_USERINFO.sub("***@", uri))


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


@contextlib.contextmanager
def _environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, unset) environment variables for the block; restore them after."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
