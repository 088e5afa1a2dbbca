"""The mark of the ZeRO-3 cases: they need DeepSpeed, which ``make test``'s install leaves out (its
first run on a machine builds one op for ~2 minutes); ``make test-zero3`` installs it and runs them."""

from __future__ import annotations

import importlib.util

import pytest

requires_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (not in make test's install): make test-zero3 runs ZeRO-3",
)
