"""The registry mirror: our promotions and rollbacks, copied into the MLflow model registry.

With ``tracking.backend: mlflow`` (and ``registry_mirror`` on), every candidate the gate judged
becomes a registered model version (linked to the run that trained it when its lineage names one),
tagged with the verdict and its reasons; a promotion moves the ``champion`` alias to its version,
a rollback moves it back. Our registry (:mod:`coa.registry`) is the source of truth and is written
first: the mirror is best effort, and a tracker that is down gives one warning, never a failure.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from coa.tracking import QUICK, _environ, _safe_uri, current, experiment_id, mlflow_client

log = logging.getLogger(__name__)

ALIAS = "champion"


class Decision(Protocol):
    """What the mirror reads of a registry event's verdict (the registry's typed
    :class:`~coa.registry.store.VerdictRecord`; this layer sits below the registry and names only the
    fields it tags)."""

    @property
    def promote(self) -> bool: ...

    @property
    def checks(self) -> Mapping[str, bool]: ...


def mirror_event(
    event: str,
    name: str,
    model_uri: str,
    verdict: Decision | None,
    reasons: Sequence[str],
) -> str | None:
    """Mirror one registry event; the model version it concerns, or None (no mirror, or it failed)."""
    config = current()
    if config.backend != "mlflow" or not config.registry_mirror:
        return None
    try:
        with _environ(QUICK):
            client, _ = mlflow_client(config)
            return _mirror(client, config.experiment, event, name, model_uri, verdict, reasons)
    except Exception as e:  # best effort: our registry already holds the event
        log.warning(
            "MLflow registry mirror skipped for %s %s of %r (%s): our registry recorded it; "
            "the MLflow registry is behind until the next event",
            event,
            _safe_uri(model_uri),
            name,
            _safe_uri(str(e).splitlines()[0] if str(e) else type(e).__name__),
        )
        return None


def _mirror(
    client: Any,
    experiment: str,
    event: str,
    name: str,
    model_uri: str,
    verdict: Decision | None,
    reasons: Sequence[str],
) -> str:
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, description="Mirrored from the coa registry (source of truth).")
    version = _version_of(client, name, model_uri)
    if version is None:
        run_id = _training_run(model_uri) or _registry_run(client, experiment, name, model_uri)
        created = client.create_model_version(
            name, f"runs:/{run_id}/model", run_id=run_id, tags={"coa.model_uri": _safe_uri(model_uri)}
        )
        version = str(created.version)
    tags = {"coa.event": event}
    if verdict is not None:
        tags["coa.verdict"] = "promote" if verdict.promote else "refuse"
        tags["coa.checks"] = json.dumps(dict(verdict.checks), sort_keys=True)[:4000]
    if reasons:
        tags["coa.reasons"] = "; ".join(reasons)[:4000]
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)
    if event in ("promote", "rollback"):
        client.set_registered_model_alias(name, ALIAS, version)
    return version


def _version_of(client: Any, name: str, model_uri: str) -> str | None:
    """The version already registered for ``model_uri`` (a rerun, a rollback to it)."""
    safe = _safe_uri(model_uri)
    for v in client.search_model_versions(f"name='{name}'"):
        if (v.tags or {}).get("coa.model_uri") == safe:
            return str(v.version)
    return None


def _training_run(model_uri: str) -> str | None:
    """The MLflow run that trained the model, when its artifact's lineage names one."""
    try:
        from coa.io import read_lineage

        tracker = read_lineage(model_uri).get("tracker") or {}
    except Exception:
        return None
    return tracker.get("run_id") if tracker.get("backend") == "mlflow" else None


def _registry_run(client: Any, experiment: str, name: str, model_uri: str) -> str:
    """A run that stands for a model trained without MLflow (its version needs a run)."""
    run = client.create_run(
        experiment_id(client, experiment),
        run_name=f"registry/{name}",
        tags={"coa.model_uri": _safe_uri(model_uri), "coa.registered_model": name},
    )
    client.set_terminated(run.info.run_id)
    return str(run.info.run_id)
