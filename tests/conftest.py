"""Test-wide setup: isolated Prefect home, no telemetry, a private storage root per test."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_SESSION_HOME = tempfile.mkdtemp(prefix="coa-test-prefect-")
atexit.register(shutil.rmtree, _SESSION_HOME, ignore_errors=True)
os.environ.setdefault("PREFECT_HOME", _SESSION_HOME)
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["DO_NOT_TRACK"] = "1"
os.environ["GX_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "120"
os.environ.pop("PREFECT_API_URL", None)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures" / "afm"


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
