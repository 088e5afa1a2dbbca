"""The same storage behaviours against a real S3 API served locally by moto (127.0.0.1)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from coa.io import Store
from coa.settings import Settings
from tests import storage_cases as cases


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_store(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("COA_S3_ENDPOINT_URL", s3_endpoint)
    bucket = f"coa-{_free_port()}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return Store(f"s3://{bucket}/pipeline", Settings.from_env())


def test_s3_roundtrip_and_reuse(s3_store: Store) -> None:
    cases.check_roundtrip_and_reuse(s3_store)


def test_s3_crash_between_write_and_commit(s3_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    cases.check_crash_between_write_and_commit(s3_store, monkeypatch)


def test_s3_contract_violation_commits_nothing(s3_store: Store) -> None:
    cases.check_contract_violation_commits_nothing(s3_store)


def test_s3_damage_is_detected_moved_aside_and_rebuilt(s3_store: Store) -> None:
    cases.check_damage_is_detected_moved_aside_and_rebuilt(s3_store)


def test_s3_torn_manifest_reads_as_uncommitted(s3_store: Store) -> None:
    cases.check_torn_manifest_reads_as_uncommitted(s3_store)


def test_s3_a_second_writer_of_the_same_key_reuses_the_first(s3_store: Store) -> None:
    cases.check_second_writer_reuses_the_first(s3_store)
