"""vLLM (``vllm serve`` 0.31, ``trl vllm-serve`` 1.16) and ``python -m coa.serve`` as RL rollout servers.

The routes and bodies are vLLM's own (``vllm/entrypoints/serve/dev/rlhf/api_router.py``,
``dev/rpc``, ``dev/cache``, ``serve/lora``); the RL routes exist only with
``VLLM_SERVER_DEV_MODE=1``. A full-weight push, one machine, no NCCL:

* ``weights="reload"`` (vLLM >= 0.31, the default): ``POST /pause?mode=keep&clear_cache=false`` →
  ``POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path": <directory>}}`` (the
  worker's own method: vLLM's loader, quantized layers included) → ``POST /update_weight_version
  {"new_version": "<V>"}`` → ``POST /reset_prefix_cache`` → ``POST /resume``.
* ``weights="worker_extension"`` (older vLLM): the same with ``{"method": "coa_load_weights",
  "args": [<directory>]}``, our worker extension (:mod:`coa.engines.worker_extension`, started with
  ``--worker-extension-cls``; dense models only).
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

``keep`` is sent with ``clear_cache=false``: vLLM 0.31 applies ``clear_cache`` (default true) to
``keep`` too (``v1/engine/core.py`` ``_finish_pause`` resets the caches with the running requests,
which are then preempted and prefilled again on the new weights), so only ``false`` keeps the running
requests' KV. ``/reset_prefix_cache`` then answers ``{"success": false}`` while those requests hold
blocks: the refusal is counted (:attr:`VLLMEngine.prefix_resets_refused`); requests carry a
``cache_salt`` per weight version (:meth:`EngineClient.cache_salt`), so a new version's request never
reuses an older version's prefix blocks whether the reset succeeded or not.

A LoRA push is TRL's file-based sync (no worker extension): pause (keep) → ``POST
/v1/load_lora_adapter`` under a new name per version (``<model>-v<V>``: vLLM keys its prefix cache on
the adapter name) → resume; old names are unloaded by :meth:`VLLMEngine.retire_adapter`, where an
adapter the engine does not hold (vLLM's 404 ``NotFoundError``: a restarted engine, or a killed run's
leftovers already gone) is no error. :meth:`VLLMEngine.check` reconciles the loaded versions from the
engine's ``/v1/models`` (a killed run's adapters), not from folders on disk.

vLLM completions carry no weight version (per-request versions are an open PR), so the client's
stamp is the version. A request sent once ``/pause`` has returned waits in vLLM's queue ("All pause
modes queue new adds", ``v1/engine/core.py`` ``pause_scheduler``) and runs on the pushed weights:
it is stamped with the pushed version and carries that version's ``cache_salt``
(:meth:`coa.engines.WeightLedger.begin`). One sent while the ``/pause`` call itself is under way
cannot be placed (it may have been admitted before the pause, or queued): it keeps the old stamp,
the older of the two, and under ``keep`` its ``old_kv`` is true. LoRA pushes need none of this: a
request names its version's adapter, which serves it to its end.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Literal

from coa.engines.base import EngineClient, EngineError, EngineKind, UnknownName
from coa.engines.lora import AdapterVersions

log = logging.getLogger("coa.engines")

WORKER_EXTENSION = "coa.engines.worker_extension.WeightLoader"
"""The ``--worker-extension-cls`` that loads a safetensors directory in place (``coa_load_weights``)."""

DEV_MODE_FIX = "start vLLM with VLLM_SERVER_DEV_MODE=1 (its RL routes /pause, /resume, /collective_rpc)"
EXTENSION_FIX = f"start vLLM with --worker-extension-cls {WORKER_EXTENSION} (coa importable on the server)"
LORA_FIX = "start vLLM with --enable-lora --max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1"
TIS_FIX = "start vLLM with --logprobs-mode processed_logprobs (or set rl.is_correction: none)"
RELOAD_FIX = (
    "run vLLM >= 0.31 (its workers' reload_weights(weights_path=...)) or set "
    "rl.rollout.server.transport: worker_extension and start vLLM with --worker-extension-cls "
    f"{WORKER_EXTENSION}"
)
RELOAD_SINCE = (0, 31)
NCCL_FIX = (
    "install vllm==0.31.0 beside the trainer (pyproject's `gpu` extra; TRL's weight-transfer client needs "
    "vLLM's PyNccl) or set rl.rollout.server.transport: worker_extension (one machine, one filesystem)"
)

PauseMode = Literal["abort", "wait", "keep"]
WeightsTransport = Literal["reload", "worker_extension", "disk", "nccl"]


class VLLMEngine(AdapterVersions, EngineClient):
    """vLLM's RL routes; ``weights`` picks how full weights travel (see the module doc)."""

    def __init__(
        self,
        root: str,
        model: str,
        *,
        kind: EngineKind = "vllm",
        pause_mode: PauseMode = "keep",
        weights: WeightsTransport = "reload",
        **kwargs: Any,
    ) -> None:
        super().__init__(root, model, **kwargs)
        self.kind = kind
        self.pause_mode = pause_mode
        self.weights_transport = weights
        self.init_adapters()
        self.streams_weights = weights == "nccl"
        self.transfer: Any = None
        """TRL's ``WeightTransferClient`` (``nccl``), opened at the first push."""
        self.tis_fix = TIS_FIX
        self.prefix_resets_refused = 0
        """``/reset_prefix_cache`` answers ``{"success": false}`` (running requests held blocks)."""

    def request_model(self, version: int | None = None) -> str:
        if version is not None and version in self.adapters:
            return self.adapter_name(version)
        return self.adapter or self.model

    def keeps_old_kv(self) -> bool:
        # a request names its adapter, which serves it to its end: a push never changes its weights
        return self.pause_mode == "keep" and self.adapter is None

    # ------------------------------------------------------------------ checks

    def check(self, full_weights: bool = True) -> None:
        if self.weights_transport == "nccl" and full_weights:
            require_vllm()
        self.check_model("start the server with --served-model-name <model>")
        self.call("GET", "/is_paused", DEV_MODE_FIX)
        info = self.call("GET", "/server_info", DEV_MODE_FIX, params={"config_format": "json"})
        mode = None
        if isinstance(info, dict) and isinstance(info.get("vllm_config"), dict):
            mode = (info["vllm_config"].get("model_config") or {}).get("logprobs_mode")
        self.logprobs_processed = None if mode is None else mode == "processed_logprobs"
        if full_weights and self.weights_transport == "worker_extension":
            self.rpc("coa_extension_ready", fix=EXTENSION_FIX)
        if full_weights and self.weights_transport == "reload":
            self.require_reload()
        self.reconcile()

    def require_reload(self) -> None:
        """The engine is vLLM >= 0.31 (``GET /version``): its workers have ``reload_weights``."""
        answer = self.call("GET", "/version", RELOAD_FIX)
        text = str(answer.get("version", "")) if isinstance(answer, dict) else ""
        found = re.match(r"(\d+)\.(\d+)", text)
        if found is None or (int(found.group(1)), int(found.group(2))) < RELOAD_SINCE:
            raise EngineError(
                f"{self.kind} server is vLLM {text or '?'}, without reload_weights: {RELOAD_FIX}"
            )

    def reconcile(self) -> None:
        """The state the engine reports, over this client's: the adapters ``<model>-v<V>`` it holds (a
        killed run's, unloaded by :meth:`retire_adapter` / replaced by :meth:`push_adapter`) and the
        version it holds (``/weight_info``; ``"default"`` after a restart)."""
        models = self.call("GET", "/v1/models", "start the server with the served model name")
        self.find_adapters(models.get("data", []))
        version = self.call("GET", "/weight_info", DEV_MODE_FIX).get("weight_version")
        if isinstance(version, str) and version.isdigit():
            self.ledger.set(int(version))

    # ------------------------------------------------------------------ pushes

    def rpc(self, method: str, *args: str, fix: str = EXTENSION_FIX, **kwargs: str) -> Any:
        body: dict[str, Any] = {"method": method, "args": list(args), "kwargs": kwargs, "timeout": None}
        try:
            return self.call("POST", "/collective_rpc", DEV_MODE_FIX, json=body)
        except EngineError as e:
            if "/collective_rpc answered" in str(e):  # the route exists; the method does not
                raise EngineError(f"{self.kind} server could not run {method} on its workers: {fix}") from e
            raise

    def pause(self) -> None:
        params: dict[str, str] = {"mode": self.pause_mode}
        if self.pause_mode == "keep":  # vLLM 0.31 drops the running requests' KV unless told not to
            params["clear_cache"] = "false"
        self.call("POST", "/pause", DEV_MODE_FIX, params=params)

    def reset_prefix_cache(self) -> bool:
        """Drop the prefix cache (old-weight KV a GRPO group's shared prompt would reuse); False when
        the engine refused (vLLM: running requests, kept by a ``keep`` pause, still hold blocks)."""
        answer = self.call("POST", "/reset_prefix_cache", DEV_MODE_FIX)
        if isinstance(answer, dict) and answer.get("success") is False:
            self.prefix_resets_refused += 1
            log.info(
                "%s server kept its prefix cache (running requests hold blocks); cache_salt separates "
                "the versions",
                self.kind,
            )
            return False
        return True

    def resume(self) -> None:
        self.call("POST", "/resume", DEV_MODE_FIX)

    def push_weights(self, directory: Path, version: int) -> None:
        path = str(directory.resolve())
        self.pause()
        self.ledger.begin(version)  # paused: requests sent from now on run on the new weights
        try:
            if self.weights_transport == "reload":
                self.rpc("reload_weights", fix=RELOAD_FIX, weights_path=path)
                self.call("POST", "/update_weight_version", DEV_MODE_FIX, json={"new_version": str(version)})
            elif self.weights_transport == "worker_extension":
                self.rpc("coa_load_weights", path)
                self.call("POST", "/update_weight_version", DEV_MODE_FIX, json={"new_version": str(version)})
            else:
                self.call("POST", "/start_weight_update", DEV_MODE_FIX, json={"is_checkpoint_format": True})
                self.call("POST", "/update_weights", DEV_MODE_FIX, json={"update_info": {"path": path}})
                self.call(
                    "POST", "/finish_weight_update", DEV_MODE_FIX, json={"weight_version": str(version)}
                )
            # a GRPO group shares its prompt: old-weight KV must not be reused from the prefix cache
            self.reset_prefix_cache()
            self.ledger.set(version)
        finally:
            self.ledger.abandon()  # a failed push: the engine resumes on the old weights
            self.resume()

    def push_model(self, model: Any, version: int) -> None:
        """``nccl``: stream ``model``'s tensors to the engine as ``version`` through TRL's client."""
        if self.transfer is None:
            self.transfer = self.open_transfer(model)
        self.pause()
        self.ledger.begin(version)
        try:
            # TRL: /start_weight_update, /update_weights {update_info} + the broadcast, /finish_weight_update
            self.transfer.send_weights((name, p.detach()) for name, p in vllm_named_params(model))
            self.call("POST", "/update_weight_version", DEV_MODE_FIX, json={"new_version": str(version)})
            self.reset_prefix_cache()
            self.ledger.set(version)
        finally:
            self.ledger.abandon()
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
                self.unload(name)
                self.call("POST", "/v1/load_lora_adapter", LORA_FIX, json=body)
                self.reset_prefix_cache()
            self.adapters.add(version)
            self.adapter = name
            self.ledger.set(version)
        finally:
            self.resume()

    def unload(self, name: str) -> bool:
        """Unload adapter ``name``; False when the engine does not hold it (vLLM's 404 ``NotFoundError``,
        ``openai/models/serving.py`` ``_check_unload_lora_adapter_request``), which is no error: TRL's
        client treats it the same. A 404 for the route itself still names the fix."""
        try:
            self.call("POST", "/v1/unload_lora_adapter", LORA_FIX, json={"lora_name": name})
        except UnknownName:
            return False
        return True

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
