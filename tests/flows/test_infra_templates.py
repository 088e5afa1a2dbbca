"""The GPU work pools' base job templates (infra/) against the templates Prefect's integrations produce.

``infra/reference/`` holds the default base job templates of prefect-docker 0.7.4 and
prefect-kubernetes 0.8.0 (``DockerWorker`` / ``KubernetesWorker.get_default_base_job_template()``).
Ours must keep their job configuration (the worker reads those keys), keep every variable with its
schema (only defaults change; new variables may be added), pass Prefect's own server-side check
(every placeholder declared) and have defaults that validate against their schemas; and they must
ask for GPUs and carry the store's environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prefect.server.schemas.actions import validate_base_job_template
from prefect.utilities.templating import apply_values

INFRA = Path(__file__).resolve().parents[2] / "infra"
CASES = {
    "docker": ("docker/gpu-pool.json", "reference/prefect-docker-0.7.4-default.json"),
    "kubernetes": ("kubernetes/gpu-pool.json", "reference/prefect-kubernetes-0.8.0-default.json"),
}


def _load(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    ours, reference = CASES[kind]
    return json.loads((INFRA / ours).read_text()), json.loads((INFRA / reference).read_text())


def _shape(schema: dict[str, Any]) -> Any:
    """A variable's schema without its default, title and description: what a worker relies on."""
    return {k: v for k, v in schema.items() if k not in ("default", "title", "description")}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_template_keeps_the_integration_schema(kind: str) -> None:
    ours, reference = _load(kind)
    validate_base_job_template(ours)  # what `prefect work-pool create --base-job-template` runs
    assert set(ours["job_configuration"]) == set(reference["job_configuration"])
    theirs, mine = reference["variables"]["properties"], ours["variables"]["properties"]
    for name, schema in theirs.items():
        assert name in mine, f"{kind}: variable {name} dropped"
        assert _shape(mine[name]) == _shape(schema), f"{kind}: variable {name} changed shape"
    for schema in mine.values():
        if "default" in schema:
            refs = {k: ours["variables"][k] for k in ("$defs", "definitions") if k in ours["variables"]}
            jsonschema.validate(schema["default"], {**schema, **refs})
    defaults = {name: schema.get("default") for name, schema in mine.items()}
    rendered = apply_values(ours["job_configuration"], defaults)
    if kind == "kubernetes":
        image = rendered["job_manifest"]["spec"]["template"]["spec"]["containers"][0]["image"]
    else:
        image = rendered["image"]
    assert image.startswith("coa-pipeline-gpu:")
    assert {"COA_STORAGE_ROOT", "COA_S3_ENDPOINT_URL"} <= set(rendered["env"])
    assert str(rendered["env"]["COA_STORAGE_ROOT"]).startswith("s3://")


def test_docker_template_requests_every_gpu() -> None:
    ours, _ = _load("docker")
    kwargs = ours["variables"]["properties"]["container_create_kwargs"]["default"]
    assert kwargs["device_requests"] == [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]


def test_kubernetes_template_requests_gpus_and_mounts_credentials() -> None:
    ours, _ = _load("kubernetes")
    defaults = {n: s.get("default") for n, s in ours["variables"]["properties"].items()}
    job = apply_values(ours["job_configuration"], {**defaults, "gpu_count": 2})["job_manifest"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 2
    assert container["envFrom"] == [{"secretRef": {"name": "coa-store-credentials"}}]
    assert any(t["key"] == "nvidia.com/gpu" for t in job["spec"]["template"]["spec"]["tolerations"])
