"""A short pipeline with the store on S3 (moto's server on 127.0.0.1): artifacts, checkpoints,
reports, lineage and the registry all live in the bucket, and a second run reuses every artifact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from coa import io
from coa.lineage import trace
from coa.plan import load_pipeline_config, plan
from coa.registry.gate import GateConfig, apply, decide
from coa.registry.store import Registry
from coa.steps import StepResult, run_step

from ..test_s3 import _free_port
from .test_pipeline_flow import SMALL

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def s3_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for key, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "COA_S3_ENDPOINT_URL": endpoint,
            "COA_CACHE_DIR": str(tmp_path / "cache"),
        }.items():
            monkeypatch.setenv(key, value)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="coa")
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        monkeypatch.setenv("COA_STORAGE_ROOT", "s3://coa/store")
        yield "s3://coa/store"
    finally:
        server.stop()


def _run(overrides: list[str]) -> dict[str, StepResult]:
    done: dict[str, StepResult] = {}
    for step in plan(load_pipeline_config(REPO / "configs/demo.yaml", overrides)):
        done[step.name] = run_step(step, io.Store(), done)
    return done


def test_pipeline_registry_and_lineage_on_s3(
    s3_root: str, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COA_STORAGE_ROOT", s3_root)  # after the autouse local root
    first = _run(SMALL)
    assert all(r.ref.uri.startswith(s3_root + "/") and not r.reused for r in first.values())
    assert first["curate"].summary["report"].startswith(s3_root)
    fs, _ = io.filesystem(s3_root)
    assert fs.exists(f"{first['curate'].ref.uri}/report.html")
    assert "model/config.json" in first["sft"].ref.files and first["sft"].ref.uri.startswith("s3://")

    graph = trace(first["sft"].ref.uri)
    assert {"synthetic", "collect", "curate", "convert", "sft"} <= {n.step for n in graph.nodes.values()}

    verdict = decide(GateConfig(bootstrap_samples=200), first["evaluate.after"].ref.uri, None)
    apply(Registry(), "agent", first["sft"].ref.uri, verdict, {"heldout": first["evaluate.after"].ref.uri})
    assert verdict.promote and Registry().resolve("agent") == first["sft"].ref.uri
    assert fs.exists("coa/store/registry/agent/champion.json")
    assert not any(storage_root.rglob("*.parquet"))  # nothing landed in the local store

    second = _run(SMALL)
    assert {k: v.ref.uri for k, v in second.items()} == {k: v.ref.uri for k, v in first.items()}
    assert all(r.reused for r in second.values())
