"""Shared pieces for the sandbox tests: the bubblewrap skip marker and small, fast limits."""

from __future__ import annotations

import pytest

from coa.tools.sandbox import SandboxConfig, sandbox_available

SANDBOX_OK, SANDBOX_MESSAGE = sandbox_available()

requires_sandbox = pytest.mark.skipif(
    not SANDBOX_OK,
    reason=f"needs bubblewrap (bwrap) with working namespaces: {SANDBOX_MESSAGE}",
)

FAST = SandboxConfig(
    cpu_seconds=2,
    wall_seconds=8,
    memory_mb=512,
    max_processes=16,
    max_file_mb=1,
    scratch_mb=16,
    max_output_bytes=64 * 1024,
)
"""Tight limits so that limit tests end quickly."""
