"""A vLLM worker extension that loads a safetensors directory into the running model, in place.

Start vLLM with ``--worker-extension-cls coa.engines.worker_extension.WeightLoader`` (this package
importable in the server's environment) and ``VLLM_SERVER_DEV_MODE=1``; the RL client
(:class:`coa.engines.vllm.VLLMEngine`) then calls ``POST /collective_rpc {"method":
"coa_load_weights", "args": ["<directory>"]}`` between ``/pause?mode=keep`` and ``/resume``: every
worker streams the directory's tensors into its model's own ``load_weights`` (which shards them for
tensor parallelism and fuses q/k/v, gate/up as vLLM's loader does). The same approach as AReaL's
vLLM extension. This module imports no vLLM at import time: vLLM mixes the class into its worker,
whose ``model_runner`` holds the model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any


def safetensors_in(directory: str) -> list[str]:
    """The ``*.safetensors`` files of ``directory``, sorted (one error line when there are none)."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{directory} is not a directory: push a folder of *.safetensors")
    files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {directory}")
    return [os.path.join(directory, f) for f in files]


def iter_tensors(directory: str, device: Any = "cpu") -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` of every tensor in the directory's safetensors files, one file open at a time."""
    from safetensors import safe_open

    for path in safetensors_in(directory):
        with safe_open(path, framework="pt", device=str(device)) as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open has keys(), no __iter__
                yield name, handle.get_tensor(name)


class WeightLoader:
    """Mixed into each vLLM worker (``--worker-extension-cls``); methods reached by ``/collective_rpc``."""

    model_runner: Any

    def coa_extension_ready(self) -> str:
        """Answers ``ok``: the client's check that the server was started with this extension."""
        return "ok"

    def coa_load_weights(self, directory: str) -> int:
        """Load every tensor of ``directory`` into the worker's model; the number of tensors read."""
        import torch

        model = self.model_runner.model
        count = 0

        def counted() -> Iterator[tuple[str, Any]]:
            nonlocal count
            for item in iter_tensors(directory):
                count += 1
                yield item

        with torch.no_grad():
            model.load_weights(weights=counted())
        try:  # vLLM's post-load hook (quantization repacking); absent in stand-ins
            from vllm.model_executor.model_loader.utils import process_weights_after_loading

            config = self.model_runner.model_config
            process_weights_after_loading(model, config, next(model.parameters()).device)
        except ImportError:
            pass
        return count
