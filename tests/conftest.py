"""Test-wide setup: isolated Prefect home, no telemetry, a private storage root per test."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.llm.fake_server import FakeLLMServer

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two workers on two cores: one intra-op thread each (and in the processes they
    # start), or their OpenMP threads contend for the cores (two threads each ran many times slower).
    os.environ.setdefault("OMP_NUM_THREADS", "1")

_SESSION_HOME = tempfile.mkdtemp(prefix="coa-test-prefect-")
atexit.register(shutil.rmtree, _SESSION_HOME, ignore_errors=True)
os.environ.setdefault("PREFECT_HOME", _SESSION_HOME)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["GX_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
os.environ.pop("PREFECT_API_URL", None)
# Trackio reads TRACKIO_DIR once, when first imported, and TRL imports it at every checkpoint save once
# it is installed: this session's Trackio is bound to a temporary folder (tests/tracking/test_trackio.py
# logs there), never to the user's Hugging Face cache, and never to a Space or a remote server.
TRACKIO_HOME = tempfile.mkdtemp(prefix="coa-test-trackio-")
atexit.register(shutil.rmtree, TRACKIO_HOME, ignore_errors=True)
os.environ["TRACKIO_DIR"] = TRACKIO_HOME
for _name in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):
    os.environ.pop(_name, None)

REPO = Path(__file__).resolve().parents[1]
# AFM's released files: ../shared beside the repo in CI; COA_AFM_FIXTURES elsewhere (a git worktree)
FIXTURES = Path(os.environ.get("COA_AFM_FIXTURES") or REPO.parent / "shared" / "fixtures" / "afm")


_TRACKER_ENV = ("COA_TRACKING", "MLFLOW_", "WANDB_", "TENSORBOARD_LOGGING_DIR", "TRACKIO_")


@pytest.fixture(autouse=True)
def no_tracker_leaks() -> Iterator[None]:
    """Tracker settings live in the environment (so subprocesses see them); a test that activates one
    in process (a CLI command's ``tracking.use``, a trainer's MLflow callback setting
    ``MLFLOW_EXPERIMENT_ID``) must not leave later tests reporting to its stopped server."""
    before = {k: v for k, v in os.environ.items() if k.startswith(_TRACKER_ENV)}
    yield
    for key in [k for k in os.environ if k.startswith(_TRACKER_ENV)]:
        if key not in before:
            del os.environ[key]
    os.environ.update(before)


@pytest.fixture(autouse=True)
def storage_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "store"
    monkeypatch.setenv("COA_STORAGE_ROOT", str(root))
    return root


@pytest.fixture
def afm_fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"AFM fixtures not found at {FIXTURES} (CI checks out ../shared beside the repo)")
    return FIXTURES


SANDBOX_MODULES = ("tests/tools/test_sandbox.py", "tests/tools/test_code.py")
"""Modules whose every test runs code in the bubblewrap sandbox (tier ``sandbox``)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Test tiers: ``sandbox`` tests need bwrap; ``cuda`` tests need a GPU. Each is skipped with the
    reason when its hardware is missing, never silently (``make test`` installs bwrap as root)."""
    has_bwrap = shutil.which("bwrap") is not None
    for item in items:
        if str(item.path.relative_to(REPO)) in SANDBOX_MODULES:
            item.add_marker(pytest.mark.sandbox)
        if "sandbox" in item.keywords and not has_bwrap:
            item.add_marker(pytest.mark.skip(reason="needs bubblewrap (apt-get install bubblewrap)"))
    # The modules holding `slow` tests (minutes each: Prefect servers, the GPU check's twin) go first, whole
    # (a module's tests stay together for its fixtures): the workers then end together, not one of them
    # starting a five-minute test while the other has nothing left.
    slow_modules = {item.path for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: item.path not in slow_modules)


# -- real teacher runs (offline backend, real tools), shared by the format, convert and curate tests --


@pytest.fixture(scope="session")
def synthetic_tasks() -> dict[str, Any]:
    from coa.synthetic import SyntheticConfig, generate_all

    cfg = SyntheticConfig(
        train={"arithmetic": 8, "multihop": 8, "programming": 4}, heldout={"arithmetic": 1, "multihop": 1}
    )
    return generate_all(cfg)


@pytest.fixture(scope="session")
def teacher_runs(synthetic_tasks: dict[str, Any]) -> list[dict[str, Any]]:
    from coa.collect.config import CollectConfig
    from coa.collect.teacher import open_teacher
    from coa.synthetic import SyntheticConfig, encyclopedia_table
    from coa.tools.collection import Collection

    synthetic = SyntheticConfig()  # the encyclopedia the tasks were drawn from: the step's table
    pages = Collection.from_table(
        encyclopedia_table(synthetic.encyclopedia_seed, synthetic.encyclopedia_size)
    )

    async def run() -> list[dict[str, Any]]:
        config = CollectConfig(tools={"record": "off"})  # type: ignore[arg-type]
        async with open_teacher(config, None, pages) as teacher:
            return list(
                await asyncio.gather(*(teacher.solve(t) for t in synthetic_tasks["train"].to_pylist()))
            )

    return asyncio.run(run())


@pytest.fixture(scope="module")
def server() -> Iterator[FakeLLMServer]:
    """A fake OpenAI-compatible endpoint on 127.0.0.1 for one test module (stopped after it)."""
    fake = FakeLLMServer()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
