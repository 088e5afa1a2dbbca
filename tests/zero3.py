"""The sharded accelerate configs the 2-rank tests run under, and the mark of the ZeRO-3 cases: they
need DeepSpeed, which ``make test``'s install leaves out (its first run on a machine builds one op for
~2 minutes); ``make test-zero3`` installs it and runs them."""

from __future__ import annotations

import importlib.util

import pytest

requires_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (not in make test's install): make test-zero3 runs ZeRO-3",
)

sharded_configs = pytest.mark.parametrize(
    ("accelerate_config", "label"),
    [
        pytest.param("fsdp2.yaml", "fsdp2", id="fsdp2"),
        pytest.param("multi_gpu_zero3.yaml", "zero3", id="zero3", marks=requires_deepspeed),
    ],
)
"""A 2-rank test over ``infra/accelerate/fsdp2.yaml`` and ``multi_gpu_zero3.yaml`` (the latter needs
DeepSpeed)."""
