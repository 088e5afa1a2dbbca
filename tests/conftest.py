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
