"""The HTTP side of ``python -m coa.serve``: vLLM's token-id completions protocol over one local HF model.

Endpoints (FastAPI, one process, one :class:`~coa.serve.engine.ContinuousBatcher`):

* ``POST /v1/completions``: vLLM's request fields (``vllm/entrypoints/openai/completion/protocol.py``):
  ``prompt`` as token ids, a text, or a batch of either (choices prompt-major, ``n`` per prompt),
  ``return_token_ids`` (``choices[i].token_ids`` / ``prompt_token_ids``),
  ``return_tokens_as_token_ids`` (tokens spelled ``token_id:<id>``), ``logprobs: n``
  (``token_logprobs``, n alternatives in ``top_logprobs``), ``prompt_logprobs: n``,
  ``stop_token_ids`` (the id is kept, ``stop_reason`` names it), ``stop`` strings, ``ignore_eos``,
  temperature / top_p / top_k / seed / max_tokens; ``min_p`` 0 and ``repetition_penalty`` 1 are
  accepted (other values refused: not implemented), unknown fields ignored as vLLM ignores them.
  Logprobs are of the sampling distribution (vLLM's ``processed_logprobs``). A prompt plus
  ``max_tokens`` beyond the model's positions is a 400 naming ``max_model_len``.
* ``GET /v1/models``: the base model (``owned_by: coa``, ``max_model_len``) and every loaded adapter.
* ``POST /v1/load_lora_adapter`` ``{lora_name, lora_path, load_inplace}`` / ``unload_lora_adapter``.
* Weight updates: vLLM's RL routes (with ``VLLM_SERVER_DEV_MODE=1``, as vLLM) or, with ``--protocol
  sglang``, SGLang's, in :mod:`coa.serve.admin`.
* ``GET /health``.

With ``--protocol vllm`` (the default) completions carry no weight version, as vLLM's; with
``--protocol sglang`` they carry SGLang's ``metadata.weight_version`` / ``weight_versions`` spans.
Errors answer vLLM's shape ``{"object": "error", "message", "type", "code"}``.
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

Protocol = Literal["vllm", "sglang"]


class CompletionRequest(BaseModel):
    """The body of ``POST /v1/completions``: vLLM's fields this server implements; others are ignored."""

    model_config = ConfigDict(extra="allow")  # vLLM's OpenAIBaseModel allows (and logs) extra fields

    model: str = Field(description="The served model name, or the name of a loaded LoRA adapter.")
    prompt: list[int] | list[list[int]] | str | list[str] = Field(
        description="Token ids or a text (tokenized here), or a batch of either."
    )
    max_tokens: int = Field(default=16, ge=1, description="Tokens to generate at most.")
    temperature: float = Field(default=1.0, ge=0, description="0 = greedy.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus mass (1 = off).")
    top_k: int | None = Field(default=0, ge=-1, description="Top-k cut (0 or -1 = off).")
    min_p: float = Field(default=0.0, ge=0, le=0, description="Accepted at 0 only (not implemented).")
    repetition_penalty: float = Field(default=1.0, ge=1, le=1, description="Accepted at 1 only.")
    frequency_penalty: float = Field(default=0.0, ge=0, le=0, description="Accepted at 0 only.")
    presence_penalty: float = Field(default=0.0, ge=0, le=0, description="Accepted at 0 only.")
    min_tokens: int = Field(default=0, ge=0, le=0, description="Accepted at 0 only.")
    use_beam_search: Literal[False] = Field(default=False, description="No beam search.")
    seed: int | None = Field(default=None, description="Seeds this request's sampler (reproducible draws).")
    n: int = Field(default=1, ge=1, le=64, description="Choices per prompt (the k-th seeded seed + k).")
    logprobs: int | None = Field(default=None, ge=0, le=20, description="Logprob of each token + n others.")
    prompt_logprobs: int | None = Field(default=None, ge=0, le=20, description="Logprobs of the prompt ids.")
    return_token_ids: bool | None = Field(default=False, description="Return the sampled and the prompt ids.")
    return_tokens_as_token_ids: bool | None = Field(default=False, description="Tokens as ``token_id:<id>``.")
    stop_token_ids: list[int] | None = Field(default_factory=list, description="Ids that end the generation.")
    stop: str | list[str] | None = Field(default=None, description="Strings that end the generation.")
    include_stop_str_in_output: bool = Field(default=False, description="Keep a matched stop string in text.")
    ignore_eos: bool = Field(default=False, description="Do not stop at the model's end-of-sequence ids.")
    skip_special_tokens: bool = Field(default=True, description="Leave special tokens out of ``text``.")
    stream: Literal[False] = Field(default=False, description="No streaming.")
    echo: Literal[False] = Field(default=False, description="No echo; use prompt_logprobs.")


class AdapterRequest(BaseModel):
    """The body of ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` (vLLM's)."""

    model_config = ConfigDict(extra="forbid")

    lora_name: str = Field(min_length=1, description="The name requests use as ``model``.")
    lora_path: str | None = Field(default=None, description="A peft adapter folder (load only).")
    load_inplace: bool = Field(default=False, description="Replace an adapter of the same name.")
    is_3d_lora_weight: bool = Field(default=False, description="Accepted (MoE adapters); no effect.")


class ServeError(Exception):
    """An error answered to the client with ``status``."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class ModelServer:
    """The state behind the routes: the model, its tokenizer, the batcher, the adapters, the versions."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        path: str = "",
        protocol: Protocol = "vllm",
        max_batch: int = 256,
        max_loras: int = 8,
        delay_per_token_s: float = 0.0,
        logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = "processed_logprobs",
    ) -> None:
        self.base = model
        self.tokenizer = tokenizer
        self.name = name
        self.path = path
        self.protocol: Protocol = protocol
        self.max_loras = max_loras
        self.logprobs_mode = logprobs_mode
        self.batcher = ContinuousBatcher(
            model,
            max_batch=max_batch,
            delay_per_token_s=delay_per_token_s,
            raw_logprobs=logprobs_mode == "raw_logprobs",
        )
        self.adapters: dict[str, str] = {}
        self.version_names: dict[int, str] = {0: "default"}  # the batcher's update count -> the name
        self.user_paused = False
        self.started = time.time()
        self.requests = 0
        self.prefix_resets = 0
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        self.eos_ids = frozenset(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self.admin = asyncio.Lock()

    @property
    def weight_version(self) -> str:
        return self.version_names.get(self.batcher.version, str(self.batcher.version))

    def set_weight_version(self, name: str | None) -> None:
        """A new update count, named ``name`` (vLLM and SGLang name versions by strings)."""
        count = self.batcher.version + 1
        self.version_names[count] = name if name is not None else str(count)
        self.batcher.set_version(count)

    # ------------------------------------------------------------------ completions

    def prompts(self, body: CompletionRequest) -> list[list[int]]:
        raw = body.prompt
        if isinstance(raw, str) or (raw and isinstance(raw[0], int)):
            raw = [raw]  # type: ignore[assignment,list-item]
        out: list[list[int]] = []
        for p in raw:
            if isinstance(p, str):
                if self.tokenizer is None:
                    raise ServeError(400, "this model folder has no tokenizer: send the prompt as token ids")
                out.append(list(self.tokenizer(p, add_special_tokens=False).input_ids))
            else:
                out.append(list(p))  # type: ignore[arg-type]
        return out

    def sglang_adapter(self, body: CompletionRequest) -> str | None:
        """The adapter an SGLang request names: ``model`` ``<served>:<adapter>`` (the part after the
        served name, or after the first colon), else its ``lora_path`` field (``serving_base.py``
        ``_resolve_lora_path``); a name not loaded is SGLang's 400 (``lora_registry.py`` ``acquire``)."""
        adapter: Any = None
        model, served = body.model, f"{self.name}:"
        if ":" in model and model != self.name:
            named = model[len(served) :] if model.startswith(served) else model.split(":", 1)[1]
            adapter = named.strip() or None
        if adapter is None:
            adapter = (body.model_extra or {}).get("lora_path")
        if adapter is not None and adapter not in self.adapters:
            raise ServeError(
                400,
                f"The following requested LoRA adapters are not loaded: {adapter}\n"
                f"Loaded adapters: dict_keys({sorted(self.adapters)}).",
                "BadRequest",
            )
        return None if adapter is None else str(adapter)

    def build(self, body: CompletionRequest, prompt: list[int], k: int = 0) -> GenRequest:
        adapter = None
        if self.protocol == "sglang":  # SGLang does not check ``model`` beyond an adapter it names
            adapter = self.sglang_adapter(body)
        elif body.model in self.adapters:
            adapter = body.model
        elif body.model != self.name:
            raise ServeError(404, f"The model `{body.model}` does not exist.", "NotFoundError")
        if not prompt:
            raise ServeError(400, "the prompt is empty")
        vocab = int(self.base.config.vocab_size)
        if any(not 0 <= t < vocab for t in prompt):
            raise ServeError(400, f"a prompt id is outside the vocabulary [0, {vocab})")
        if self.max_positions and len(prompt) + body.max_tokens > self.max_positions:
            raise ServeError(
                400,
                f"This model's maximum context length is {self.max_positions} tokens (max_model_len); "
                f"the prompt ({len(prompt)}) + max_tokens ({body.max_tokens}) exceed it",
            )
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if stops and self.tokenizer is None:
            raise ServeError(400, "stop strings need a tokenizer; send stop_token_ids")
        return GenRequest(
            prompt=prompt,
            max_tokens=body.max_tokens,
            temperature=body.temperature,
            top_p=body.top_p,
            top_k=max(body.top_k or 0, 0),
            seed=None if body.seed is None else body.seed + k,
            stop_ids=frozenset(body.stop_token_ids or ()),
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
        requests = [self.build(body, p, k) for p in self.prompts(body) for k in range(body.n)]
        results = await asyncio.gather(*(self._run(r) for r in requests))
        self.requests += 1
        return self.response(body, results)

    async def _run(self, request: GenRequest) -> GenRequest:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenRequest] = loop.create_future()

        def done(r: GenRequest) -> None:
            loop.call_soon_threadsafe(_settle, future, r)

        request.done = done
        try:
            self.batcher.submit(request)
        except RuntimeError as e:
            raise ServeError(503, str(e), "ServiceUnavailableError") from e
        result = await future
        if result.finish == "abort" and not result.ids:
            raise ServeError(503, f"the request was aborted: {result.error}", "ServiceUnavailableError")
        return result

    def response(self, body: CompletionRequest, results: list[GenRequest]) -> dict[str, Any]:
        choices = [self.choice(body, i, r) for i, r in enumerate(results)]
        prompt_tokens = sum(len(r.prompt) for r in results[:: body.n])
        completion_tokens = sum(len(r.ids) for r in results)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        payload: dict[str, Any] = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": choices,
            "usage": usage | {"total_tokens": prompt_tokens + completion_tokens},
        }
        if self.protocol == "sglang":  # sglang/srt/utils/weight_versions.py: per output, token spans
            r = results[0]
            spans = r.version_spans or [(r.version_first or 0, 0)]
            ends = [start for _, start in spans[1:]] + [len(r.ids)]
            payload["metadata"] = {
                "weight_version": self.version_names.get(r.version_last or 0, "default"),
                "weight_versions": [
                    {"version": self.version_names.get(v, str(v)), "start": start, "end": end}
                    for (v, start), end in zip(spans, ends, strict=True)
                ],
            }
        return payload

    def choice(self, body: CompletionRequest, index: int, r: GenRequest) -> dict[str, Any]:
        text = self._text(r.ids, body.skip_special_tokens)
        if isinstance(r.stop_reason, str) and not body.include_stop_str_in_output and r.stop_reason in text:
            text = text[: text.index(r.stop_reason)]
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None, "finish_reason": r.finish}
        if self.protocol == "sglang":
            choice["matched_stop"] = r.stop_reason
        else:
            choice["stop_reason"] = r.stop_reason
        as_ids = bool(body.return_tokens_as_token_ids)
        if body.logprobs is not None:
            choice["logprobs"] = {
                "tokens": [self._token(t, as_ids) for t in r.ids],
                "token_logprobs": r.token_logprobs,
                "top_logprobs": [{self._token(t, as_ids): v for t, v in top} for top in r.top_logprobs],
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
        return choice

    def _text(self, ids: list[int], skip_special: bool) -> str:
        if self.tokenizer is None:
            return ""
        return str(self.tokenizer.decode(ids, skip_special_tokens=skip_special))

    def _token(self, token: int, as_ids: bool = False) -> str:
        if as_ids or self.tokenizer is None:
            return f"token_id:{token}"
        return str(self.tokenizer.convert_ids_to_tokens(token))

    # ------------------------------------------------------------------ models and adapters

    def models(self) -> dict[str, Any]:
        owner = "sglang" if self.protocol == "sglang" else "coa"
        card = {"object": "model", "created": int(self.started), "owned_by": owner}
        card["max_model_len"] = self.max_positions or None
        data = [card | {"id": self.name, "root": self.name, "parent": None}]
        for name, path in self.adapters.items():
            data.append(card | {"id": name, "root": path, "parent": self.name})
        return {"object": "list", "data": data}

    async def load_adapter(self, body: AdapterRequest) -> str:
        if not body.lora_path:
            raise ServeError(400, "lora_path is required")
        replace = body.load_inplace and body.lora_name in self.adapters
        if (body.lora_name in self.adapters and not replace) or body.lora_name == self.name:
            raise ServeError(400, f"The lora adapter '{body.lora_name}' has already been loaded.")
        if len(self.adapters) >= self.max_loras and not replace:
            raise ServeError(400, f"{self.max_loras} adapters are loaded (--max-loras); unload one first")
        if not os.path.isfile(os.path.join(body.lora_path, "adapter_config.json")):
            raise ServeError(400, f"{body.lora_path} is not a peft adapter folder (no adapter_config.json)")
        async with self.paused("keep"):
            if replace:
                await asyncio.to_thread(self._unload_adapter, body.lora_name)
                del self.adapters[body.lora_name]
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
        async with self.paused("wait"):  # no running row may name it any more
            await asyncio.to_thread(self._unload_adapter, body.lora_name)
        del self.adapters[body.lora_name]
        return f"Success: LoRA adapter '{body.lora_name}' removed successfully."

    @contextlib.asynccontextmanager
    async def paused(self, mode: Literal["wait", "keep"]) -> AsyncIterator[None]:
        """Run the block with the batcher paused; resume after unless a client had paused it."""
        async with self.admin:
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
            "protocol": self.protocol,
            "weight_version": self.weight_version,
            "paused": self.batcher.paused,
            "running": self.batcher.running,
            "waiting": self.batcher.waiting,
            "adapters": sorted(self.adapters),
            "requests": self.requests,
            "steps": self.batcher.steps,
            "prefix_cache_resets": self.prefix_resets,
        }


def _settle(future: asyncio.Future[GenRequest], request: GenRequest) -> None:
    if not future.done():
        future.set_result(request)
