"""The HTTP side of ``python -m coa.serve``: vLLM's token-id completions protocol over one local HF model.

Endpoints (FastAPI, one process, one :class:`~coa.serve.engine.ContinuousBatcher`):

* ``POST /v1/completions``: ``prompt`` as a list of token ids (or a string, tokenized here), with
  vLLM's extensions: ``return_token_ids`` (``choices[0].token_ids`` / ``prompt_token_ids``),
  ``logprobs: n`` (``choices[0].logprobs.token_logprobs`` and n alternatives in ``top_logprobs``),
  ``prompt_logprobs: n`` (``choices[0].prompt_logprobs``: None, then per prompt token a dict
  ``{id: {"logprob", "rank"}}`` holding the actual id first), ``stop_token_ids`` (the id is kept,
  ``stop_reason`` names it), ``stop`` strings, ``ignore_eos``, temperature / top_p / top_k / seed /
  max_tokens. ``model`` is the served name or a loaded adapter's name. One prompt and one choice
  per request (``n: 1``; a list of prompts is refused, not half-served).
* ``GET /v1/models``: the base model and every loaded adapter (``parent`` = the base).
* ``POST /v1/load_lora_adapter`` ``{lora_name, lora_path}`` / ``POST /v1/unload_lora_adapter``
  ``{lora_name}``: peft LoRA adapters beside the base weights, applied per request (a batch mixes
  rows of different adapters and of none).
* Full-weight updates, the shape of TRL 1.16's async client against vLLM (pause, update, resume),
  with the weights passed as a file instead of over NCCL (CPU-friendly): ``POST /pause?mode=wait``
  (the running requests finish first; ``mode=keep`` freezes them mid-sequence, they continue on the
  new weights), ``POST /update_weights`` ``{path, version}`` (a safetensors file, a folder of them,
  or a ``torch.save`` state dict; the base model's tensor names; every tensor must match), ``POST
  /resume``. An update sent while not paused pauses (``wait``) and resumes around itself.
* ``GET /health``, ``GET /server_info``.

Every completion names the weights it was sampled with: ``weight_version`` (and
``weight_version_end``, equal unless a ``keep`` pause updated the weights mid-request) in the
body, ``x-weight-version`` in the headers; the version is the integer the last ``update_weights``
set (0 at start). Errors answer vLLM's shape ``{"object": "error", "message", "type", "code"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coa.serve.engine import ContinuousBatcher, GenRequest
from coa.serve.weights import assign_weights, load_state_dict_file


class CompletionRequest(BaseModel):
    """The body of ``POST /v1/completions`` (the subset of vLLM's this server implements)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="The served model name, or the name of a loaded LoRA adapter.")
    prompt: list[int] | str = Field(
        description="Token ids (or a text, tokenized with the model's tokenizer)."
    )
    max_tokens: int = Field(default=16, ge=1, description="Tokens to generate at most.")
    temperature: float = Field(default=1.0, ge=0, description="0 = greedy.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus mass (1 = off).")
    top_k: int = Field(default=0, ge=-1, description="Top-k cut (0 or -1 = off).")
    seed: int | None = Field(default=None, description="Seeds this request's sampler (reproducible draws).")
    logprobs: int | None = Field(default=None, ge=0, le=20, description="Logprob of each token + n others.")
    prompt_logprobs: int | None = Field(default=None, ge=0, le=20, description="Logprobs of the prompt ids.")
    return_token_ids: bool = Field(default=False, description="Return the sampled and the prompt ids.")
    stop_token_ids: list[int] = Field(default_factory=list, description="Ids that end the generation (kept).")
    stop: str | list[str] | None = Field(default=None, description="Strings that end the generation.")
    include_stop_str_in_output: bool = Field(default=False, description="Keep a matched stop string in text.")
    ignore_eos: bool = Field(default=False, description="Do not stop at the model's end-of-sequence ids.")
    skip_special_tokens: bool = Field(default=True, description="Leave special tokens out of ``text``.")
    spaces_between_special_tokens: bool = Field(default=True, description="Accepted; no effect here.")
    n: Literal[1] = Field(default=1, description="One choice per request.")
    stream: Literal[False] = Field(default=False, description="No streaming.")
    echo: Literal[False] = Field(default=False, description="No echo; use prompt_logprobs.")
    user: str | None = Field(default=None, description="Accepted; not used.")


class AdapterRequest(BaseModel):
    """The body of ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1, description="The name requests use as ``model``.")
    lora_path: str | None = Field(default=None, description="A peft adapter folder (load only).")


class WeightUpdate(BaseModel):
    """The body of ``POST /update_weights``."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="A .safetensors file, a folder of them, or a torch.save state dict.")
    version: int | None = Field(default=None, description="The new weight version (default: current + 1).")


class ServeError(Exception):
    """An error answered to the client with ``status``."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class ModelServer:
    """The state behind the routes: the model, its tokenizer, the batcher, the adapters."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        max_batch: int = 256,
        max_loras: int = 8,
        delay_per_token_s: float = 0.0,
    ) -> None:
        self.base = model
        self.tokenizer = tokenizer
        self.name = name
        self.max_loras = max_loras
        self.batcher = ContinuousBatcher(model, max_batch=max_batch, delay_per_token_s=delay_per_token_s)
        self.adapters: dict[str, str] = {}
        self.user_paused = False
        self.started = time.time()
        self.requests = 0
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        self.eos_ids = frozenset(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self._admin = asyncio.Lock()

    # ------------------------------------------------------------------ completions

    def build(self, body: CompletionRequest) -> GenRequest:
        adapter = None
        if body.model != self.name:
            if body.model not in self.adapters:
                raise ServeError(404, f"The model `{body.model}` does not exist.", "NotFoundError")
            adapter = body.model
        if isinstance(body.prompt, str):
            if self.tokenizer is None:
                raise ServeError(400, "this model folder has no tokenizer: send the prompt as token ids")
            prompt = list(self.tokenizer(body.prompt, add_special_tokens=False).input_ids)
        else:
            prompt = list(body.prompt)
        if not prompt:
            raise ServeError(400, "the prompt is empty")
        vocab = int(self.base.config.vocab_size)
        if any(not 0 <= t < vocab for t in prompt):
            raise ServeError(400, f"a prompt id is outside the vocabulary [0, {vocab})")
        if self.max_positions and len(prompt) + body.max_tokens > self.max_positions:
            raise ServeError(
                400,
                f"prompt ({len(prompt)}) + max_tokens ({body.max_tokens}) exceeds the model's "
                f"{self.max_positions} positions",
            )
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if stops and self.tokenizer is None:
            raise ServeError(400, "stop strings need a tokenizer; send stop_token_ids")
        return GenRequest(
            prompt=prompt,
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=max(body.top_k, 0),
            seed=body.seed,
            stop_ids=frozenset(body.stop_token_ids),
            eos_ids=frozenset() if body.ignore_eos else self.eos_ids,
            stop_check=self._stop_check(stops) if stops else None,
            adapter=adapter,
            logprobs=body.logprobs,
            prompt_logprobs=body.prompt_logprobs,
        )

    def _stop_check(self, stops: list[str]) -> Any:
        longest = max(len(s) for s in stops)

        def check(ids: list[int]) -> str | None:
            tail = self.tokenizer.decode(ids[-(longest + 8) :], skip_special_tokens=False)
            return next((s for s in stops if s in tail), None)

        return check

    async def complete(self, body: CompletionRequest) -> dict[str, Any]:
        request = self.build(body)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenRequest] = loop.create_future()

        def done(r: GenRequest) -> None:
            loop.call_soon_threadsafe(_settle, future, r)

        request.done = done
        try:
            self.batcher.submit(request)
        except RuntimeError as e:
            raise ServeError(503, str(e), "ServiceUnavailableError") from e
        self.requests += 1
        result = await future
        if result.finish == "abort":
            raise ServeError(503, f"the request was aborted: {result.error}", "ServiceUnavailableError")
        return self.response(body, result)

    def response(self, body: CompletionRequest, r: GenRequest) -> dict[str, Any]:
        text = self._text(r.ids, body.skip_special_tokens)
        if isinstance(r.stop_reason, str) and not body.include_stop_str_in_output and r.stop_reason in text:
            text = text[: text.index(r.stop_reason)]
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": r.finish,
            "stop_reason": r.stop_reason,
        }
        if body.logprobs is not None:
            choice["logprobs"] = {
                "tokens": [self._token(t) for t in r.ids],
                "token_logprobs": r.token_logprobs,
                "top_logprobs": [{self._token(t): v for t, v in top} for top in r.top_logprobs],
                "text_offset": [],
            }
        if body.prompt_logprobs is not None:
            choice["prompt_logprobs"] = [
                None
                if entry is None
                else {str(t): {"logprob": v, "rank": k + 1} for k, (t, v) in enumerate(entry)}
                for entry in r.prompt_logprob_values
            ]
        if body.return_token_ids:
            choice |= {"token_ids": r.ids, "prompt_token_ids": r.prompt}
        usage = {"prompt_tokens": len(r.prompt), "completion_tokens": len(r.ids)}
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [choice],
            "usage": usage | {"total_tokens": len(r.prompt) + len(r.ids)},
            "weight_version": r.version_first,
            "weight_version_end": r.version_last,
        }

    def _text(self, ids: list[int], skip_special: bool) -> str:
        if self.tokenizer is None:
            return ""
        return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special))

    def _token(self, token: int) -> str:
        if self.tokenizer is None:
            return f"token_id:{token}"
        return str(self.tokenizer.convert_ids_to_tokens(token))

    # ------------------------------------------------------------------ models and adapters

    def models(self) -> dict[str, Any]:
        base = {"id": self.name, "object": "model", "created": int(self.started), "owned_by": "coa"}
        data = [base | {"root": self.name, "parent": None}]
        for name, path in self.adapters.items():
            data.append({"id": name, "object": "model", "created": int(self.started), "owned_by": "coa",
                         "root": path, "parent": self.name})  # fmt: skip
        return {"object": "list", "data": data}

    async def load_adapter(self, body: AdapterRequest) -> str:
        if not body.lora_path:
            raise ServeError(400, "lora_path is required")
        if body.lora_name in self.adapters or body.lora_name == self.name:
            raise ServeError(400, f"The lora adapter '{body.lora_name}' has already been loaded.")
        if len(self.adapters) >= self.max_loras:
            raise ServeError(400, f"{self.max_loras} adapters are loaded (--max-loras); unload one first")
        if not os.path.isfile(os.path.join(body.lora_path, "adapter_config.json")):
            raise ServeError(400, f"{body.lora_path} is not a peft adapter folder (no adapter_config.json)")
        async with self._paused("keep"):
            await asyncio.to_thread(self._load_adapter, body.lora_name, body.lora_path)
        self.adapters[body.lora_name] = body.lora_path
        return f"Success: LoRA adapter '{body.lora_name}' added successfully."

    def _load_adapter(self, name: str, path: str) -> None:
        from peft import PeftModel

        model = self.batcher.model
        try:
            if isinstance(model, PeftModel):
                model.load_adapter(path, adapter_name=name)
            else:
                self.batcher.model = PeftModel.from_pretrained(model, path, adapter_name=name).eval()
        except (ValueError, KeyError, OSError, RuntimeError) as e:
            raise ServeError(400, f"could not load adapter {name!r} from {path}: {e}") from e

    def _unload_adapter(self, name: str) -> None:
        model = self.batcher.model
        if len(self.adapters) == 1:  # peft cannot run with no adapter left: unwrap to the base model
            self.batcher.model = model.unload()
        else:
            model.delete_adapter(name)

    async def unload_adapter(self, body: AdapterRequest) -> str:
        if body.lora_name not in self.adapters:
            raise ServeError(404, f"The lora adapter '{body.lora_name}' cannot be found.", "NotFoundError")
        async with self._paused("wait"):  # no running row may name it any more
            await asyncio.to_thread(self._unload_adapter, body.lora_name)
        del self.adapters[body.lora_name]
        return f"Success: LoRA adapter '{body.lora_name}' removed successfully."

    # ------------------------------------------------------------------ weights

    async def pause(self, mode: Literal["wait", "keep"]) -> dict[str, Any]:
        async with self._admin:
            await asyncio.to_thread(self.batcher.pause, mode)
            self.user_paused = True
        return self.info()

    async def resume(self) -> dict[str, Any]:
        async with self._admin:
            self.user_paused = False
            self.batcher.resume()
        return self.info()

    async def update_weights(self, body: WeightUpdate) -> dict[str, Any]:
        if not os.path.exists(body.path):
            raise ServeError(400, f"no weights at {body.path}")
        version = self.batcher.version + 1 if body.version is None else body.version
        async with self._paused("wait"):
            try:
                state = await asyncio.to_thread(load_state_dict_file, body.path)
                copied = await asyncio.to_thread(assign_weights, self.base, state)
            except (KeyError, ValueError, FileNotFoundError, OSError, RuntimeError) as e:
                raise ServeError(400, f"weights not updated (the old ones are in place): {e}") from e
            self.batcher.set_version(version)
        return self.info() | {"tensors": copied}

    @contextlib.asynccontextmanager
    async def _paused(self, mode: Literal["wait", "keep"]) -> AsyncIterator[None]:
        """Run the block with the batcher paused; resume after unless a client had paused it."""
        async with self._admin:
            if not self.user_paused:
                await asyncio.to_thread(self.batcher.pause, mode)
            try:
                yield
            finally:
                if not self.user_paused:
                    self.batcher.resume()

    def info(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "weight_version": self.batcher.version,
            "paused": self.batcher.paused,
            "running": self.batcher.running,
            "waiting": self.batcher.waiting,
            "adapters": sorted(self.adapters),
            "requests": self.requests,
            "steps": self.batcher.steps,
        }


def create_app(server: ModelServer) -> Any:
    """The FastAPI application over ``server`` (the batcher starts and stops with the app)."""
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        server.batcher.start()
        try:
            yield
        finally:
            server.batcher.stop()

    app = FastAPI(title="coa.serve", lifespan=lifespan)

    def error(status: int, message: str, kind: str) -> JSONResponse:
        body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
        return JSONResponse(body, status_code=status)

    @app.exception_handler(ServeError)
    async def serve_error(_: Request, e: ServeError) -> JSONResponse:
        return error(e.status, str(e), e.kind)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:])
        return error(400, f"{where}: {first.get('msg', 'invalid request')}", "BadRequestError")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> JSONResponse:
        payload = await server.complete(body)
        return JSONResponse(payload, headers={"x-weight-version": str(payload["weight_version"])})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return server.models()

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(body: AdapterRequest) -> PlainTextResponse:
        return PlainTextResponse(await server.load_adapter(body))

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(body: AdapterRequest) -> PlainTextResponse:
        return PlainTextResponse(await server.unload_adapter(body))

    @app.post("/pause")
    async def pause(mode: Literal["wait", "keep"] = "wait") -> dict[str, Any]:
        return await server.pause(mode)

    @app.post("/resume")
    async def resume() -> dict[str, Any]:
        return await server.resume()

    @app.post("/update_weights")
    async def update_weights(body: WeightUpdate) -> dict[str, Any]:
        return await server.update_weights(body)

    @app.get("/health")
    async def health() -> JSONResponse:
        if server.batcher.failure is not None:
            return error(503, f"the batcher failed: {server.batcher.failure!r}", "ServiceUnavailableError")
        return JSONResponse({"status": "ok", "weight_version": server.batcher.version})

    @app.get("/server_info")
    async def server_info() -> dict[str, Any]:
        return server.info()

    return app


def _settle(future: asyncio.Future[GenRequest], request: GenRequest) -> None:
    if not future.done():
        future.set_result(request)
