"""vLLM (``vllm serve`` 0.31, ``trl vllm-serve`` 1.16) and ``python -m coa.serve`` as RL rollout servers.

The routes and bodies are vLLM's own (``vllm/entrypoints/serve/dev/rlhf/api_router.py``,
``dev/rpc``, ``dev/cache``, ``serve/lora``); the RL routes exist only with
``VLLM_SERVER_DEV_MODE=1``. A full-weight push, one machine, no NCCL:

* ``weights="worker_extension"`` (vLLM): ``POST /pause?mode=keep`` → ``POST /collective_rpc
  {"method": "coa_load_weights", "args": [<directory>]}`` (our worker extension,
  :mod:`coa.engines.worker_extension`, started with ``--worker-extension-cls``) → ``POST
  /update_weight_version {"new_version": "<V>"}`` → ``POST /reset_prefix_cache`` → ``POST /resume``.
* ``weights="disk"`` (coa.serve): ``/pause`` → ``POST /start_weight_update`` → ``POST
  /update_weights {"update_info": {"path": <directory>}}`` (the shape of vLLM's draft ``disk``
  weight-transfer backend, PR 52152) → ``POST /finish_weight_update {"weight_version": "<V>"}`` →
  ``/reset_prefix_cache`` → ``/resume``.

* ``weights="nccl"`` (vLLM started with ``--weight-transfer-config '{"backend": "nccl"}'``, trainer
  and engine on different GPUs): the tensors themselves, through **TRL's own weight-transfer client**
  (``trl.experimental.async_grpo.weight_transfer.WeightTransferClient``: ``/init_weight_transfer_engine``
  once, then ``/start_weight_update`` → ``/update_weights {"update_info": {names, dtype_names,
  shapes}}`` while it broadcasts over NCCL → ``/finish_weight_update``), between our ``/pause`` and
  ``/resume``, then ``/update_weight_version`` and ``/reset_prefix_cache``. It needs vLLM importable
  in the trainer's environment (vLLM's PyNccl); :meth:`VLLMEngine.check` says so in one line. Not
  run against a real engine: the route bodies are checked against transcribed fixtures only.

A LoRA push is TRL's file-based sync: pause (keep) → ``POST /v1/load_lora_adapter`` under a new
name per version (``<model>-v<V>``: vLLM keys its prefix cache on the adapter name) → resume; old
names are unloaded by :meth:`VLLMEngine.retire_adapter`. vLLM completions carry no weight version:
the ledger's stamp is the version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from coa.engines.base import EngineClient, EngineError, EngineKind

WORKER_EXTENSION = "coa.engines.worker_extension.WeightLoader"
"""The ``--worker-extension-cls`` that loads a safetensors directory in place (``coa_load_weights``)."""

DEV_MODE_FIX = "start vLLM with VLLM_SERVER_DEV_MODE=1 (its RL routes /pause, /resume, /collective_rpc)"
EXTENSION_FIX = f"start vLLM with --worker-extension-cls {WORKER_EXTENSION} (coa importable on the server)"
LORA_FIX = "start vLLM with --enable-lora --max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
TIS_FIX = "start vLLM with --logprobs-mode processed_logprobs (or set rl.is_correction: none)"
NCCL_FIX = (
    "install vllm==0.31.0 beside the trainer (pyproject's `gpu` extra; TRL's weight-transfer client needs "
    "vLLM's PyNccl) or set rl.rollout.server.transport: worker_extension (one machine, one filesystem)"
)

PauseMode = Literal["abort", "wait", "keep"]
WeightsTransport = Literal["worker_extension", "disk", "nccl"]


class VLLMEngine(EngineClient):
    """vLLM's RL routes; ``weights`` picks how full weights travel (see the module doc)."""

    def __init__(
        self,
        root: str,
        model: str,
        *,
        kind: EngineKind = "vllm",
        pause_mode: PauseMode = "keep",
        weights: WeightsTransport = "worker_extension",
        **kwargs: Any,
    ) -> None:
        super().__init__(root, model, **kwargs)
        self.kind = kind
        self.pause_mode = pause_mode
        self.weights_transport = weights
        self.adapter: str | None = None
        self.streams_weights = weights == "nccl"
        self.transfer: Any = None
        """TRL's ``WeightTransferClient`` (``nccl``), opened at the first push."""
        self.adapters: set[int] = set()
        """The versions whose adapters are loaded (pushed and not yet retired)."""
        self.tis_fix = TIS_FIX

    def adapter_name(self, version: int) -> str:
        return f"{self.model}-v{version}"

    def request_model(self, version: int | None = None) -> str:
        if version is not None and version in self.adapters:
            return self.adapter_name(version)
        return self.adapter or self.model

    def keeps_old_kv(self) -> bool:
        # a request names its adapter, which serves it to its end: a push never changes its weights
        return self.pause_mode == "keep" and self.adapter is None

    # ------------------------------------------------------------------ checks

    def check(self) -> None:
        if self.weights_transport == "nccl":
            require_vllm()
        self.check_model("start the server with --served-model-name <model>")
        self.call("GET", "/is_paused", DEV_MODE_FIX)
        info = self.call("GET", "/server_info", DEV_MODE_FIX, params={"config_format": "json"})
        mode = None
        if isinstance(info, dict) and isinstance(info.get("vllm_config"), dict):
            mode = (info["vllm_config"].get("model_config") or {}).get("logprobs_mode")
        self.logprobs_processed = None if mode is None else mode == "processed_logprobs"
        if self.weights_transport == "worker_extension":
            self.rpc("coa_extension_ready", fix=EXTENSION_FIX)

    # ------------------------------------------------------------------ pushes

    def rpc(self, method: str, *args: str, fix: str = EXTENSION_FIX) -> Any:
        body: dict[str, Any] = {"method": method, "args": list(args), "kwargs": {}, "timeout": None}
        try:
            return self.call("POST", "/collective_rpc", DEV_MODE_FIX, json=body)
        except EngineError as e:
            if "/collective_rpc answered" in str(e):  # the route exists; the method does not
                raise EngineError(f"{self.kind} server could not run {method} on its workers: {fix}") from e
            raise

    def pause(self) -> None:
        self.call("POST", "/pause", DEV_MODE_FIX, params={"mode": self.pause_mode})

    def resume(self) -> None:
        self.call("POST", "/resume", DEV_MODE_FIX)

    def push_weights(self, directory: Path, version: int) -> None:
        path = str(directory.resolve())
        self.pause()
        try:
            if self.weights_transport == "worker_extension":
                self.rpc("coa_load_weights", path)
                self.call("POST", "/update_weight_version", DEV_MODE_FIX, json={"new_version": str(version)})
            else:
                self.call("POST", "/start_weight_update", DEV_MODE_FIX, json={"is_checkpoint_format": True})
                self.call("POST", "/update_weights", DEV_MODE_FIX, json={"update_info": {"path": path}})
                self.call(
                    "POST", "/finish_weight_update", DEV_MODE_FIX, json={"weight_version": str(version)}
                )
            # a GRPO group shares its prompt: old-weight KV must not be reused from the prefix cache
            self.call("POST", "/reset_prefix_cache", DEV_MODE_FIX)
            self.ledger.set(version)
        finally:
            self.resume()

    def push_model(self, model: Any, version: int) -> None:
        """``nccl``: stream ``model``'s tensors to the engine as ``version`` through TRL's client."""
        if self.transfer is None:
            self.transfer = self.open_transfer(model)
        self.pause()
        try:
            # TRL: /start_weight_update, /update_weights {update_info} + the broadcast, /finish_weight_update
            self.transfer.send_weights((name, p.detach()) for name, p in vllm_named_params(model))
            self.call("POST", "/update_weight_version", DEV_MODE_FIX, json={"new_version": str(version)})
            self.call("POST", "/reset_prefix_cache", DEV_MODE_FIX)
            self.ledger.set(version)
        finally:
            self.resume()

    def open_transfer(self, model: Any) -> Any:
        """TRL's NCCL ``WeightTransferClient`` for ``model`` (its manifest: names, dtypes, shapes), joined."""
        require_vllm()
        from accelerate.state import PartialState
        from trl.experimental.async_grpo.vllm_client import VLLMClient
        from trl.experimental.async_grpo.weight_transfer import WeightTransferClient

        names, dtypes, shapes = [], [], []
        for name, param in vllm_named_params(model):
            names.append(name)
            dtypes.append(str(param.dtype).split(".")[-1])
            shapes.append(list(param.shape))
        manifest = {"names": names, "dtype_names": dtypes, "shapes": shapes}
        PartialState()  # TRL's client logs through accelerate's logger (the trainer made it already)
        transfer = WeightTransferClient(VLLMClient(self.root), manifest)
        transfer.init_weight_transfer()
        return transfer

    def close(self) -> None:
        if self.transfer is not None:
            self.transfer.destroy()
            self.transfer = None
        super().close()

    def push_adapter(self, directory: Path, version: int) -> None:
        name = self.adapter_name(version)
        body = {"lora_name": name, "lora_path": str(directory.resolve()), "load_inplace": False}
        self.pause()
        try:
            try:
                self.call("POST", "/v1/load_lora_adapter", LORA_FIX, json=body)
            except EngineError as e:
                if "already been loaded" not in str(e):
                    raise
                # a killed run (or one resumed at this version) left an adapter of this name: replace it,
                # and drop the prefix cache that may hold its KV
                self.call("POST", "/v1/unload_lora_adapter", LORA_FIX, json={"lora_name": name})
                self.call("POST", "/v1/load_lora_adapter", LORA_FIX, json=body)
                self.call("POST", "/reset_prefix_cache", DEV_MODE_FIX)
            self.adapters.add(version)
            self.adapter = name
            self.ledger.set(version)
        finally:
            self.resume()

    def retire_adapter(self, version: int) -> None:
        name = self.adapter_name(version)
        if name != self.adapter:
            self.call("POST", "/v1/unload_lora_adapter", LORA_FIX, json={"lora_name": name})
            self.adapters.discard(version)

    def retire_adapters(self) -> None:
        for version in sorted(self.adapters):
            self.call(
                "POST", "/v1/unload_lora_adapter", LORA_FIX, json={"lora_name": self.adapter_name(version)}
            )
        self.adapters.clear()
        self.adapter = None

    def weight_version(self) -> str:
        """The version the engine holds (``GET /weight_info``; ``"default"`` before any push)."""
        return str(self.call("GET", "/weight_info", DEV_MODE_FIX)["weight_version"])


def require_vllm() -> None:
    """vLLM importable in this (the trainer's) environment, else one line naming the fix."""
    from trl.import_utils import is_vllm_available

    if not is_vllm_available():
        raise EngineError(
            f"rl.rollout.server.transport: nccl needs vLLM importable in the trainer: {NCCL_FIX}"
        )


def vllm_named_params(model: Any) -> Any:
    """``(name, parameter)`` as vLLM names them: TRL's own walk (the one its async trainer sends)."""
    from trl.experimental.async_grpo.async_grpo_trainer import _iter_vllm_named_params

    return _iter_vllm_named_params(model)
