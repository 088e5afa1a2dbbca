"""A PostgreSQL server for the orchestration tests' Prefect server, as production runs it.

The session starts one PostgreSQL cluster from the Debian binaries (``initdb``, ``pg_ctl``: the
``postgresql`` package; ``make test`` installs it as root) in a temporary folder, on 127.0.0.1 and a
free port, with trust authentication; each test gets a fresh database (:func:`database_url`), so a
test's Prefect server starts on an empty schema. Without the binaries the tests that need it are
skipped with the reason. As root (``initdb`` refuses to run as root) the cluster runs as the
``postgres`` system user. SQLite stays the embedded default of ``make demo`` and the in-process tests.
"""

from __future__ import annotations

import dataclasses
import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

MISSING = (
    "the orchestration tests run their Prefect server on PostgreSQL, and its server binaries (initdb, "
    "pg_ctl) are missing: apt-get install postgresql (make test does, as root)"
)
_databases = itertools.count()


def _binary(name: str) -> str | None:
    """``name`` on PATH, else in Debian's versioned folder (the newest version)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(p.split("/")[4]))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class Postgres:
    """A running cluster: where it listens and how to run its client binaries."""

    port: int
    bindir: str

    def database_url(self) -> str:
        """A fresh, empty database on the cluster, as Prefect's connection URL."""
        name = f"prefect_{os.getpid()}_{next(_databases)}"
        createdb = os.path.join(self.bindir, "createdb")
        subprocess.run(
            [createdb, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{name}"


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.fail(MISSING)  # a missing database is a set-up to fix, not a test to pass over
    bindir = str(Path(os.path.realpath(initdb)).parent)
    root = Path(tempfile.mkdtemp(prefix="coa-postgres-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb and postgres refuse root: run them as the postgres system user
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log, port = str(root / "data"), str(root / "postgres.log"), _free_port()
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    try:
        subprocess.run(
            [*as_user, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        subprocess.run(
            [*as_user, pg_ctl, "-D", data, "-l", log, "-w", "-o", options, "start"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    except subprocess.CalledProcessError as e:
        tail = Path(log).read_text()[-2000:] if Path(log).exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"PostgreSQL did not start: {e.stderr.decode()[-2000:]}{tail}")
    try:
        yield Postgres(port, bindir)
    finally:
        subprocess.run(
            [*as_user, pg_ctl, "-D", str(data), "-m", "fast", "stop"], capture_output=True, timeout=60
        )
        shutil.rmtree(root, ignore_errors=True)
