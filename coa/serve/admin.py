"""Weight updates of ``python -m coa.serve``: vLLM's RL routes, or SGLang's, on the stand-in's batcher.

vLLM (``--protocol vllm`` and ``VLLM_SERVER_DEV_MODE=1``, as vLLM gates them; shapes from
``vllm/entrypoints/serve/dev/{rlhf,rpc,cache,server_info}/api_router.py`` of vLLM 0.31):

* ``POST /pause?mode=abort|wait|keep&clear_cache=true|false`` (default ``abort``: running requests
  end with finish ``abort``; ``wait``: they finish first; ``keep``: they freeze and continue after
  ``/resume``, with their old KV cache only when ``clear_cache=false``: with vLLM 0.31's default
  ``true`` their caches are reset and they are prefilled again on the new weights, as
  ``v1/engine/core.py`` ``_finish_pause`` does), ``POST /resume``, ``GET /is_paused``, ``POST
  /abort_requests``, ``GET /version`` (the vLLM release whose routes this speaks).
* ``POST /start_weight_update`` → ``POST /update_weights {"update_info": {"path": <directory>}}``
  (the transport of vLLM's draft ``disk`` backend: a directory of ``*.safetensors``; a body without
  ``update_info`` is vLLM's 400 "Missing 'update_info'") → ``POST /finish_weight_update
  {"weight_version": "<string>"}``; ``POST /update_weight_version {"new_version"}``; ``GET
  /weight_info`` ``{"weight_version"}`` (``"default"`` at start).
* ``POST /collective_rpc {"method", "args", "kwargs"}``: the worker's own ``reload_weights`` with
  ``kwargs {"weights_path": <directory>}`` (vLLM 0.31), and the methods of our vLLM worker extension
  (:class:`coa.engines.worker_extension.WeightLoader`: ``coa_extension_ready``,
  ``coa_load_weights``); any other method is vLLM's 500 for a worker without it.
* ``POST /reset_prefix_cache`` (counted: this server keeps no prefix cache; it answers vLLM's
  ``{"success": false}`` while running requests hold KV, as vLLM's block pool refuses a reset while
  blocks are in use), ``GET /server_info``
  (``vllm_config.model_config``: ``dtype``, ``max_model_len``, ``logprobs_mode:
  processed_logprobs``).

SGLang (``--protocol sglang``; ``sglang/srt/entrypoints/http_server.py`` and the request structs of
``sglang/srt/managers/io_struct.py``, 0.5.23): ``POST /pause_generation {"mode"}`` (``abort``;
``in_place`` = vLLM's keep; ``retract``: the running requests go back to the queue with their ids
and are prefilled again after the update, so their KV is recomputed on the new weights),
``POST /continue_generation``, ``POST /update_weights_from_disk {"model_path": <model folder>,
"weight_version", "flush_cache", ...}`` (answers ``{"success", "message", "num_paused_requests"}``;
on success the server serves the model under ``model_path``, as SGLang's tokenizer manager renames
it, and completions name any model, as SGLang does not check it),
``GET /model_info`` (and the deprecated ``/get_model_info``), ``GET /server_info``, ``/flush_cache``;
``POST /load_lora_adapter {"lora_name", "lora_path"}`` / ``/unload_lora_adapter {"lora_name"}``
answering SGLang's ``LoRAUpdateOutput`` (``{"success", "error_message", "loaded_adapters"}``, 400
when refused: an adapter name already loaded, an unload of a name not loaded), requests selecting an
adapter by ``model: "<served>:<adapter>"`` or ``lora_path`` (:meth:`ModelServer.sglang_adapter`).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Literal

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from coa.serve.app import AdapterRequest, ModelServer, ServeError
from coa.serve.weights import assign_weights, load_state_dict_file

VLLM_ROUTES_VERSION = "0.31.0"
"""The vLLM release whose dev routes ``--protocol vllm`` speaks (``GET /version``)."""


class FinishUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weight_version: str | None = Field(default=None, description="The name of the new weights.")


class RPC(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: str = Field(description="A worker method (here: the coa worker extension's).")
    args: list[str] = Field(default_factory=list, description="String arguments (vLLM serializes none).")
    kwargs: dict[str, str] = Field(default_factory=dict, description="String keyword arguments.")
    timeout: float | None = Field(default=None, description="Seconds (accepted).")


class PauseGeneration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["abort", "retract", "in_place"] = Field(default="abort", description="io_struct's modes.")
    rid: str | None = Field(default=None, description="BaseReq's request id (accepted).")


class LoadLoRA(BaseModel):
    """SGLang's ``LoadLoRAAdapterReqInput`` (unknown fields dropped, as msgspec drops them)."""

    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1, description="The name requests select it by.")
    lora_path: str = Field(description="A peft adapter folder.")
    pinned: bool = Field(default=False, description="Accepted; no effect here.")
    lora_id: str | None = Field(default=None, description="Set by SGLang's tokenizer manager.")


class UnloadLoRA(BaseModel):
    """SGLang's ``UnloadLoRAAdapterReqInput``."""

    model_config = ConfigDict(extra="ignore")
    lora_name: str = Field(min_length=1, description="The adapter to unload.")
    lora_id: str | None = Field(default=None, description="Set by SGLang's tokenizer manager.")


class UpdateFromDisk(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model_path: str = Field(description="A model folder (config.json + safetensors).")
    load_format: str | None = None
    abort_all_requests: bool = False
    weight_version: str | None = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True
    manifest: dict[str, Any] | None = None
    rid: str | None = None


async def load_directory(server: ModelServer, path: str) -> int:
    """Copy the tensors of ``path`` into the served model (the batcher must be paused); tensors copied."""
    if not os.path.isdir(path):
        raise ServeError(400, f"{path} is not a directory of *.safetensors (one directory per version)")
    try:
        state = await asyncio.to_thread(load_state_dict_file, path)
        return await asyncio.to_thread(assign_weights, server.base, state)
    except (KeyError, ValueError, FileNotFoundError, OSError, RuntimeError) as e:
        raise ServeError(400, f"weights not updated (the old ones are in place): {e}") from e


async def pause(server: ModelServer, mode: Literal["abort", "wait", "keep", "retract"]) -> None:
    async with server.admin:
        if mode == "retract":
            await asyncio.to_thread(server.batcher.retract_running)
        elif mode == "abort":
            await asyncio.to_thread(server.batcher.abort_running, "aborted by /pause (mode abort)")
        else:
            await asyncio.to_thread(server.batcher.pause, mode)
        server.user_paused = True


async def resume(server: ModelServer) -> None:
    async with server.admin:
        server.user_paused = False
        server.batcher.resume()


def add_vllm_dev_routes(app: Any, server: ModelServer) -> None:
    """vLLM's RL routes (``VLLM_SERVER_DEV_MODE=1``) over ``server``'s batcher."""
    from fastapi import Body, Query

    updating: dict[str, bool] = {"open": False}

    @app.post("/pause")
    async def pause_route(
        mode: Literal["abort", "wait", "keep"] = Query("abort"),
        wait_for_inflight_requests: bool = Query(False),
        clear_cache: bool = Query(True),
    ) -> dict[str, Any]:
        chosen: Literal["abort", "wait", "keep", "retract"] = mode
        if wait_for_inflight_requests and mode == "abort":
            chosen = "wait"
        elif mode == "keep" and clear_cache:  # the caches reset: running requests prefilled again later
            chosen = "retract"
        await pause(server, chosen)
        return {"status": "paused"}

    @app.get("/version")
    async def version() -> dict[str, Any]:
        return {"version": VLLM_ROUTES_VERSION}

    @app.post("/resume")
    async def resume_route() -> dict[str, Any]:
        await resume(server)
        return {"status": "resumed"}

    @app.get("/is_paused")
    async def is_paused() -> dict[str, Any]:
        return {"is_paused": server.batcher.paused}

    @app.post("/abort_requests")
    async def abort_requests() -> dict[str, Any]:
        count = await asyncio.to_thread(server.batcher.abort_running, "aborted by /abort_requests")
        if not server.user_paused:
            server.batcher.resume()
        return {"status": "aborted", "aborted": count}

    @app.post("/start_weight_update")
    async def start_weight_update() -> dict[str, Any]:
        updating["open"] = True
        return {"message": "Weight update started"}

    @app.post("/update_weights")
    async def update_weights(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError as e:
            raise ServeError(400, "Invalid JSON format") from e
        info = body.get("update_info") if isinstance(body, dict) else None
        if info is None:
            raise ServeError(400, "Missing 'update_info' in request body")
        if not updating["open"]:
            raise ServeError(400, "no weight update is open: POST /start_weight_update first")
        if not isinstance(info, dict) or not isinstance(info.get("path"), str):
            raise ServeError(400, "coa.serve's weight transfer is disk: update_info is {'path': <directory>}")
        async with server.paused("wait"):
            copied = await load_directory(server, info["path"])
        return {"message": "Weights updated", "tensors": copied}

    @app.post("/finish_weight_update")
    async def finish_weight_update(body: FinishUpdate | None = None) -> dict[str, Any]:
        updating["open"] = False
        server.set_weight_version(body.weight_version if body is not None else None)
        return {"message": "Weight update finished"}

    @app.post("/update_weight_version")
    async def update_weight_version(new_version: str = Body(..., embed=True)) -> dict[str, Any]:
        server.set_weight_version(new_version)
        return {"success": True, "new_version": new_version}

    @app.get("/weight_info")
    async def weight_info() -> dict[str, Any]:
        return {"weight_version": server.weight_version}

    @app.post("/collective_rpc")
    async def collective_rpc(body: RPC) -> dict[str, Any]:
        if body.method == "coa_extension_ready":
            return {"results": ["ok"]}
        if body.method == "reload_weights" and set(body.kwargs) == {"weights_path"} and not body.args:
            async with server.paused("wait"):
                await load_directory(server, body.kwargs["weights_path"])
            return {"results": ["None"]}
        if body.method == "coa_load_weights" and len(body.args) == 1:
            async with server.paused("wait"):
                return {"results": [await load_directory(server, body.args[0])]}
        raise ServeError(500, f"'Worker' object has no attribute '{body.method}'", "InternalServerError")

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache(
        reset_running_requests: bool = Query(False), reset_external: bool = Query(False)
    ) -> dict[str, Any]:
        if server.batcher.running and not reset_running_requests:
            return {"success": False}  # running requests hold KV blocks
        server.prefix_resets += 1
        return {"success": True}

    @app.get("/server_info")
    async def server_info(config_format: Literal["text", "json"] = Query("text")) -> dict[str, Any]:
        model_config = {
            "model": server.path or server.name,
            "served_model_name": server.name,
            "dtype": str(next(server.base.parameters()).dtype),
            "max_model_len": server.max_positions,
            "logprobs_mode": server.logprobs_mode,
        }
        config = {"model_config": model_config}
        rendered = config if config_format == "json" else str(config)
        return {"vllm_config": rendered, "vllm_env": {}, "coa": server.info()}


def add_sglang_routes(app: Any, server: ModelServer) -> None:
    """SGLang's admin routes over ``server``'s batcher."""

    @app.post("/pause_generation")
    async def pause_generation(body: PauseGeneration) -> dict[str, Any]:
        mode = {"abort": "abort", "in_place": "keep", "retract": "retract"}[body.mode]
        await pause(server, mode)  # type: ignore[arg-type]
        return {"message": "Generation paused successfully.", "status": "ok"}

    @app.post("/continue_generation")
    async def continue_generation(body: dict[str, Any] | None = None) -> dict[str, Any]:
        await resume(server)
        return {"message": "Generation continued successfully.", "status": "ok"}

    @app.post("/update_weights_from_disk")
    async def update_weights_from_disk(body: UpdateFromDisk) -> Any:
        from fastapi.responses import JSONResponse

        if not os.path.isfile(os.path.join(body.model_path, "config.json")):
            message = f"{body.model_path} is no model folder (no config.json); a hub id cannot be loaded here"
            return JSONResponse({"success": False, "message": message, "num_paused_requests": 0}, 400)
        try:
            async with server.paused("wait"):
                await load_directory(server, body.model_path)
                server.set_weight_version(body.weight_version)
                server.name = server.path = body.model_path  # SGLang serves it under the pushed path
        except ServeError as e:
            return JSONResponse({"success": False, "message": str(e), "num_paused_requests": 0}, 400)
        return {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}

    def model_info() -> dict[str, Any]:
        return {
            "model_path": server.path or server.name,
            "served_model_name": server.name,
            "tokenizer_path": server.path or server.name,
            "is_generation": True,
            "weight_version": server.weight_version,
        }

    app.get("/model_info")(model_info)
    app.get("/get_model_info")(model_info)

    def server_info() -> dict[str, Any]:
        return {"model_path": server.path or server.name, "weight_version": server.weight_version} | {
            "coa": server.info()
        }

    app.get("/server_info")(server_info)
    app.get("/get_server_info")(server_info)

    def lora_update(success: bool, message: str | None = None, listed: bool = True) -> Any:
        """SGLang's ``LoRAUpdateOutput`` (``io_struct.py``), 400 unless ``success`` (``http_server.py``
        ``load_lora_adapter``); ``loaded_adapters`` name -> path as its ``lora_manager.py`` lists them,
        null for a refusal its tokenizer manager answers (``tokenizer_control_mixin.py``)."""
        from fastapi.responses import JSONResponse

        body = {
            "success": success,
            "error_message": "" if message is None else message,
            "loaded_adapters": dict(server.adapters) if listed else None,
        }
        return JSONResponse(body, 200 if success else 400)

    @app.post("/load_lora_adapter")
    async def load_lora_adapter(body: LoadLoRA) -> Any:
        if body.lora_name in server.adapters:  # lora_manager.py validate_new_adapter
            return lora_update(
                False, f"Failed to load LoRA adapter {body.lora_name} because it is already loaded"
            )
        try:
            await server.load_adapter(AdapterRequest(lora_name=body.lora_name, lora_path=body.lora_path))
        except ServeError as e:
            return lora_update(False, str(e))
        return lora_update(True)

    @app.post("/unload_lora_adapter")
    async def unload_lora_adapter(body: UnloadLoRA) -> Any:
        if body.lora_name not in server.adapters:  # lora_registry.py unregister
            loaded = f"dict_keys({sorted(server.adapters)})"
            message = f"LoRA with name {body.lora_name} does not exist. Loaded LoRAs: {loaded}"
            return lora_update(False, message, listed=False)
        await server.unload_adapter(AdapterRequest(lora_name=body.lora_name))
        return lora_update(True)

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> dict[str, Any]:
        server.prefix_resets += 1
        return {"message": "Cache flushed."}
