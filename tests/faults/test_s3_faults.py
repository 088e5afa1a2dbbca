"""The store on S3 under faults, through the S3 API: moto's server behind a proxy that fails requests
on purpose (:mod:`tests.faults.s3proxy`), so the real client stack (s3fs over botocore, ``standard``
retry mode, ``COA_S3_MAX_ATTEMPTS``) meets them.

* transient HTTP 500s and throttling (503 ``SlowDown``) on PUT, COPY, HEAD, LIST, GET during a step's
  write, its commit and a reuse/read are retried: the step commits what a clean run commits (same
  content key, same content hash: byte-identical tables), a reuse reuses, a read reads;
* faults that outlast the retries fail the step with one line (exit 3) naming the step and the fix,
  and commit nothing (a half-moved commit reads as uncommitted; a committed artifact that cannot be
  read is left as it is, never moved aside as damaged); once S3 answers again the rerun commits the
  same content;
* a writer SIGKILLed at seeded write requests (held at the proxy, so the kill lands exactly there;
  the held request then reaches S3 or not, seeded) leaves nothing that reads as committed unless it
  is complete and checks out; the rerun commits the same content key and content.

The stage is ``coa tasks synthetic`` (deterministic, fast): what is tested is the store's write,
commit and read path, which every stage shares.
"""

from __future__ import annotations

import json
import logging
import os
import random
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from typer.testing import CliRunner

from coa import io
from coa.cli import app
from tests.faults.conftest import record
from tests.faults.harness import CONFIG, REPO, TASKS, command
from tests.faults.s3proxy import WRITES, FaultyS3

ARGS = ["tasks", "synthetic", "-c", CONFIG, *TASKS]
STAGE = "s3 tasks"
KILLS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3:
    """moto's server, the faulty proxy in front of it, and a boto3 client that bypasses the proxy
    (the test's own look at the bucket: no faults, no client caches)."""

    def __init__(self) -> None:
        port = _free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
        self.server.start()
        self.direct = f"http://127.0.0.1:{port}"
        self.proxy = FaultyS3(self.direct).start()
        self.client = boto3.client(
            "s3", endpoint_url=self.direct, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        self.reference: dict[str, Any] = {}

    def env(self, bucket: str) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "COA_S3_ENDPOINT_URL": self.proxy.endpoint,
            "COA_S3_MAX_ATTEMPTS": "3",
            "COA_STORAGE_ROOT": f"s3://{bucket}/store",
        }

    def bucket(self) -> str:
        name = f"coa-faults-{len(self.client.list_buckets()['Buckets'])}"  # one per test
        self.client.create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "store/") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def manifest(self, bucket: str, uri: str) -> dict[str, Any] | None:
        key = f"{uri.split(f's3://{bucket}/', 1)[1]}/{io.MANIFEST}"
        try:
            body = self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return dict(json.loads(body))

    def stop(self) -> None:
        self.proxy.stop()
        self.server.stop()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    """One moto server and proxy for the module; the reference: a clean run's URI, key, content hash
    and how many write requests it made (where the kills are seeded)."""
    werkzeug = logging.getLogger("werkzeug")  # moto's server logs every request
    level = werkzeug.level
    werkzeug.setLevel(logging.WARNING)
    env = S3()
    try:
        bucket = env.bucket()
        start = len(env.proxy.log)
        code, out, err = run_cli(env, bucket)
        assert code == 0, err[-3000:]
        uri = out.strip().splitlines()[-1]
        manifest = env.manifest(bucket, uri)
        assert manifest is not None
        writes = [op for op, _ in env.proxy.log[start:] if op in WRITES]
        env.reference = {"folder": uri.rsplit("/", 1)[1], "manifest": manifest, "writes": len(writes)}
        yield env
    finally:
        env.stop()
        werkzeug.setLevel(level)


def run_cli(s3: S3, bucket: str, *args: str) -> tuple[int, str, str]:
    """``coa tasks synthetic`` (or ``args``) in this process, against ``bucket`` through the proxy."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # a fresh client: no listing cached from an earlier run
    result = CliRunner().invoke(app, list(args or ARGS), env=s3.env(bucket))
    return result.exit_code, result.stdout, result.stderr


def _uri(s3: S3, bucket: str) -> str:
    return f"s3://{bucket}/store/tasks/{s3.reference['folder']}"


def _is_the_reference(s3: S3, bucket: str, out: str) -> dict[str, bool]:
    """The checks a run under faults must pass: the reference's key and content, and a folder that
    holds exactly its manifest's files, no staging or failure marker left."""
    uri = out.strip().splitlines()[-1] if out.strip() else ""
    manifest = s3.manifest(bucket, _uri(s3, bucket)) or {}
    folder = f"store/tasks/{s3.reference['folder']}/"
    present = {k[len(folder) :] for k in s3.keys(bucket, folder)}
    return {
        "same content key": uri == _uri(s3, bucket),
        "same content": manifest.get("content_hash") == s3.reference["manifest"]["content_hash"],
        "folder holds exactly its manifest": present == {*manifest.get("files", {}), io.LINEAGE, io.MANIFEST},
        "no staging or failure marker left": not [
            k for k in s3.keys(bucket) if k.startswith(("store/.staging/", "store/failures/"))
        ],
    }


def _one_line_infra_error(code: int, err: str) -> bool:
    lines = [line for line in err.splitlines() if line.strip()]
    return (
        code == 3
        and len(lines) == 1
        and lines[0].startswith("error: infrastructure error: step synthetic: the store s3://")
        and "rerun" in lines[0]
        and "Traceback" not in err
    )


def test_transient_faults_during_write_and_commit_are_retried(s3: S3) -> None:
    """500s and SlowDowns on every kind of request of a build and its commit (one of them after S3
    applied the manifest's PUT: the reply was lost): retried, and the commit is the reference's."""
    bucket = s3.bucket()
    faults = {
        "HTTP 500 on PUT during the write": s3.proxy.fail(
            "PUT", "InternalError", times=2, match="/.staging/"
        ),
        "SlowDown on COPY during the commit": s3.proxy.fail("COPY", "SlowDown", times=2),
        "HTTP 500 after the manifest PUT landed": s3.proxy.fail(
            "PUT", "InternalError", times=1, match=io.MANIFEST, after=True
        ),
        "SlowDown on HEAD and LIST": s3.proxy.fail({"HEAD", "LIST"}, "SlowDown", times=2),
        "HTTP 500 on the staging DELETE": s3.proxy.fail({"DELETE", "POST"}, "InternalError", times=1),
    }
    try:
        code, out, err = run_cli(s3, bucket)
    finally:
        s3.proxy.clear()
    checks = {"exit 0": code == 0, **_is_the_reference(s3, bucket, out)}
    for kind, fault in faults.items():
        for _ in range(fault.hits):
            record(STAGE, f"{kind} (retried)", all(checks.values()))
    assert all(checks.values()), (checks, err[-2000:])
    assert all(f.hits for f in faults.values()), {k: f.hits for k, f in faults.items()}


def test_transient_faults_during_reuse_and_read_are_retried(s3: S3) -> None:
    """A rerun through SlowDowns and 500s on HEAD, GET and LIST reuses the committed artifact (checked
    against its manifest); a read through them returns the table."""
    bucket = s3.bucket()
    code, out, err = run_cli(s3, bucket)
    assert code == 0, err[-2000:]
    clean = _read(s3, bucket)
    faults = {
        "SlowDown on HEAD during a reuse": s3.proxy.fail("HEAD", "SlowDown", times=2),
        "HTTP 500 on GET during a reuse": s3.proxy.fail("GET", "InternalError", times=2),
    }
    try:
        code, out, err = run_cli(s3, bucket)
        read = s3.proxy.fail({"GET", "HEAD"}, "SlowDown", times=2)
        table = _read(s3, bucket)
    finally:
        s3.proxy.clear()
    checks = {
        "exit 0": code == 0,
        "reused": "reused committed artifact" in err + out,
        "the read returns the table": table.equals(clean),
        **_is_the_reference(s3, bucket, out),
    }
    for kind, fault in {**faults, "SlowDown on GET/HEAD during a read": read}.items():
        for _ in range(fault.hits):
            record(STAGE, f"{kind} (retried)", all(checks.values()))
    assert all(f.hits for f in faults.values()) and read.hits, {k: f.hits for k, f in faults.items()}
    assert all(checks.values()), (checks, err[-2000:])


def _read(s3: S3, bucket: str) -> Any:
    """The artifact's train table, read through the proxy by a fresh client."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    with pytest.MonkeyPatch.context() as mp:
        for key, value in s3.env(bucket).items():
            mp.setenv(key, value)
        return io.read_table(_uri(s3, bucket), "train")


@pytest.mark.parametrize(
    "where",
    ["PUT during the write", "COPY during the commit", "manifest PUT"],
)
def test_faults_that_outlast_the_retries_fail_in_one_line_and_commit_nothing(s3: S3, where: str) -> None:
    """Every attempt fails (from the second file on, for the commit's copies): exit 3 with one line,
    nothing committed (a half-moved commit has no manifest); when S3 answers again the rerun commits
    the reference's content and removes the half-moved files."""
    bucket = s3.bucket()
    fault = {
        "PUT during the write": lambda: s3.proxy.fail("PUT", "InternalError", None, match="/.staging/"),
        "COPY during the commit": lambda: s3.proxy.fail("COPY", "InternalError", None, skip=1),
        "manifest PUT": lambda: s3.proxy.fail("PUT", "InternalError", None, match=io.MANIFEST),
    }[where]()
    try:
        code, _, err = run_cli(s3, bucket)
    finally:
        s3.proxy.clear()
    folder = f"store/tasks/{s3.reference['folder']}/"
    after_failure = {
        "one line, exit 3": _one_line_infra_error(code, err),
        "nothing committed": s3.manifest(bucket, _uri(s3, bucket)) is None,
    }
    if where != "PUT during the write":  # the commit had begun: some files are in place, unlisted
        after_failure["half-moved files present, uncommitted"] = bool(s3.keys(bucket, folder))
    code, out, err2 = run_cli(s3, bucket)
    checks = {**after_failure, "rerun exit 0": code == 0, **_is_the_reference(s3, bucket, out)}
    record(STAGE, f"HTTP 500 on every {where}, then rerun", all(checks.values()))
    assert fault.hits >= 3, fault.hits  # the client retried before giving up
    assert all(checks.values()), (checks, err, err2[-2000:])


def test_persistent_faults_on_a_reuse_fail_in_one_line_and_damage_nothing(s3: S3) -> None:
    """A committed artifact whose reads keep failing: one line (exit 3), the artifact is left as it is
    (not moved aside as damaged, not rebuilt over); the rerun reuses it."""
    bucket = s3.bucket()
    code, out, err = run_cli(s3, bucket)
    assert code == 0, err[-2000:]
    before = s3.keys(bucket)
    fault = s3.proxy.fail({"GET", "HEAD"}, "InternalError", None)
    try:
        code, _, err = run_cli(s3, bucket)
    finally:
        s3.proxy.clear()
    untouched = s3.keys(bucket) == before
    rerun, out, err2 = run_cli(s3, bucket)
    checks = {
        "one line, exit 3": _one_line_infra_error(code, err),
        "artifact untouched": untouched,
        "rerun reuses it": rerun == 0 and "reused committed artifact" in err2 + out,
        **_is_the_reference(s3, bucket, out),
    }
    record(STAGE, "HTTP 500 on every GET/HEAD of a reuse", all(checks.values()))
    assert fault.hits >= 3, fault.hits
    assert all(checks.values()), (checks, err, err2[-2000:])


def test_sigkill_at_seeded_write_requests_then_rerun(s3: S3) -> None:
    """``coa tasks synthetic`` on S3 in a subprocess, SIGKILLed while its k-th write request (seeded
    over the reference's writes: staging PUTs, the commit's copies and deletes, lineage; then the
    manifest's PUT) is in flight; the held request then reaches S3 or not (seeded). After each kill
    nothing reads as committed unless it is complete and checks out; the rerun commits the
    reference's key and content."""
    bucket = s3.bucket()
    env = {**os.environ, "PYTHONPATH": str(REPO), **s3.env(bucket)}
    rng = random.Random("s3-sigkill")
    n = s3.reference["writes"]
    # seeded moments, one per third of the writes, then the last write: the manifest's PUT (the commit)
    moments = [1 + int(n * (k + rng.random()) / KILLS) for k in range(KILLS)] + [n]
    consistent, injected = [], 0
    for nth in moments:
        forward = rng.random() < 0.5
        s3.proxy.hold(min(nth, n))
        proc = subprocess.Popen(command(*ARGS), cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while not s3.proxy.held.wait(0.05):
                if proc.poll() is not None:  # nothing left to write: an earlier kill's manifest landed
                    break
                assert time.monotonic() < deadline, "the write request never came"
            else:
                proc.kill()
                proc.wait(timeout=30)
                s3.proxy.release(forward)
                injected += 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            s3.proxy.clear()
        manifest = s3.manifest(bucket, _uri(s3, bucket))
        consistent.append(  # nothing committed, or the whole reference (the manifest PUT landed)
            manifest is None or _is_the_reference(s3, bucket, _uri(s3, bucket))["same content"]
        )
    code, out, err = run_cli(s3, bucket)
    checks = {
        "nothing reads as committed after a kill unless complete": all(consistent),
        "rerun exit 0": code == 0,
        **_is_the_reference(s3, bucket, out),
    }
    # a killed writer's staging folder stays under .staging/ (on S3 no lock tells a dead writer from
    # a live one): it is never inside the artifact and never read, so only the marker is checked
    del checks["no staging or failure marker left"]
    checks["no failure marker left"] = not [k for k in s3.keys(bucket) if k.startswith("store/failures/")]
    for _ in range(injected):
        record(STAGE, "SIGKILL at a write request, then rerun", all(checks.values()))
    assert injected >= 3, f"only {injected} of {len(moments)} kills landed (moments {moments} of {n} writes)"
    assert all(checks.values()), (checks, moments, err[-2000:])
