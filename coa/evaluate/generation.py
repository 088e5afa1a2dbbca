"""Text generators the CoA loop drives: Hugging Face ``generate`` in process, or a completions server.

A :class:`Generator` turns prompts into :class:`Completion` objects that end at the first stop
tag (a closing tool tag or ``</answer>``, kept in the text), at the end of the turn, or at the token
limit. Both backends build the prompt with the model's chat template (:meth:`chat_prompt`) and
count tokens with its tokenizer, so a run costs the same whichever backend produced it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, Protocol

from coa.format.segments import TOOL_TAGS

STOP_TAGS: tuple[str, ...] = tuple(f"</{t}>" for t in TOOL_TAGS) + ("</answer>",)
"""Generation pauses after these: a tool runs, or the run is over."""

StopReason = Literal["stop", "eos", "length"]


@dataclasses.dataclass(frozen=True)
class Completion:
    """One generation: its text (ending with the stop tag when ``reason == 'stop'``) and its cost."""

    text: str
    n_tokens: int
    reason: StopReason
    stop: str | None = None


class Generator(Protocol):
    """What the CoA loop needs from a model."""

    name: str

    def chat_prompt(self, system: str, user: str) -> str: ...

    def count_tokens(self, text: str) -> int: ...

    def generate(self, prompts: Sequence[str], max_new_tokens: Sequence[int]) -> list[Completion]: ...


def _chat_template_prompt(tokenizer: Any, system: str, user: str) -> str:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def chatml_prompt(system: str, user: str) -> str:
    """The ChatML prompt (the tiny student's and Qwen's template) for one system + user turn."""
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


class HFGenerator:
    """Greedy (or sampled) batched ``generate`` of a local Hugging Face model, left-padded."""

    def __init__(self, model: str, *, temperature: float = 0.0, device: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = model
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        loaded: Any = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
        self.model = loaded.to(self.device).eval()
        self.temperature = temperature
        vocab = self.tokenizer.get_vocab()
        self.stop_ids = {vocab[t]: t for t in STOP_TAGS if t in vocab}
        self.single_token_stops = len(self.stop_ids) == len(STOP_TAGS)
        eos = self.model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        self.eos_ids = set(eos_ids) | {self.tokenizer.eos_token_id}

    def chat_prompt(self, system: str, user: str) -> str:
        return _chat_template_prompt(self.tokenizer, system, user)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def generate(self, prompts: Sequence[str], max_new_tokens: Sequence[int]) -> list[Completion]:
        import torch

        enc = self.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        enc = enc.to(self.device)
        kwargs: dict[str, Any] = {
            "max_new_tokens": max(max_new_tokens),
            "eos_token_id": sorted(self.eos_ids | set(self.stop_ids)),
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        if not self.single_token_stops:
            kwargs |= {"stop_strings": list(STOP_TAGS), "tokenizer": self.tokenizer}
        if self.temperature > 0:
            kwargs |= {"do_sample": True, "temperature": self.temperature}
        else:
            kwargs |= {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        with torch.inference_mode():
            out = self.model.generate(**enc, **kwargs)
        new_tokens = out[:, enc.input_ids.shape[1] :].tolist()
        return [self._completion(ids, limit) for ids, limit in zip(new_tokens, max_new_tokens, strict=True)]

    def _completion(self, ids: list[int], limit: int) -> Completion:
        reason: StopReason = "length"
        stop = None
        n = min(len(ids), limit)
        for i, token in enumerate(ids[:limit]):
            if token in self.stop_ids:
                n, reason, stop = i + 1, "stop", self.stop_ids[token]
                break
            if token in self.eos_ids:
                n, reason = i + 1, "eos"
                break
        keep = ids[: n - 1] if reason == "eos" else ids[:n]
        text = str(self.tokenizer.decode(keep, skip_special_tokens=False, clean_up_tokenization_spaces=False))
        if reason == "length" and stop is None:
            for tag in STOP_TAGS:  # multi-token stop strings (a tokenizer without tag tokens)
                cut = text.find(tag)
                if cut != -1:
                    text, reason, stop = text[: cut + len(tag)], "stop", tag
                    break
        return Completion(text, n, reason, stop)


class EndpointGenerator:
    """An OpenAI-compatible ``/completions`` server (vLLM): one request per prompt, several in flight.

    Stop strings are cut from the returned text by the OpenAI protocol; vLLM names the one that
    matched in ``stop_reason``, and it is put back so the loop sees the closing tag.
    """

    def __init__(self, endpoint: Any, tokenizer: str | None = None, *, temperature: float = 0.0) -> None:
        import httpx

        self.endpoint = endpoint
        self.name = endpoint.model
        self.base_url = endpoint.resolved_base_url()
        self.temperature = temperature
        self.tokenizer = None
        if tokenizer is not None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        headers = {}
        key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.client = httpx.Client(headers=headers, timeout=endpoint.timeout_s)
        self.max_concurrency = endpoint.max_concurrency

    def chat_prompt(self, system: str, user: str) -> str:
        if self.tokenizer is not None:
            return _chat_template_prompt(self.tokenizer, system, user)
        return chatml_prompt(system, user)

    def count_tokens(self, text: str) -> int:
        if self.tokenizer is not None:
            return len(self.tokenizer(text, add_special_tokens=False).input_ids)
        from coa.llm.tokens import approx_token_count

        return approx_token_count(text)

    def generate(self, prompts: Sequence[str], max_new_tokens: Sequence[int]) -> list[Completion]:
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(self._one, prompts, max_new_tokens))

    def _one(self, prompt: str, limit: int) -> Completion:
        import httpx

        body = {
            "model": self.endpoint.model,
            "prompt": prompt,
            "max_tokens": limit,
            "temperature": self.temperature,
            "stop": list(STOP_TAGS),
        }
        url = f"{self.base_url}/completions"
        try:
            response = self.client.post(url, json=body)
        except httpx.HTTPError as e:
            raise RuntimeError(f"completion endpoint {url} unreachable: {type(e).__name__}: {e}") from e
        if response.status_code != 200:
            raise RuntimeError(
                f"completion endpoint {url} answered {response.status_code}: {response.text[:300]}"
            )
        data = response.json()
        choice = data["choices"][0]
        text = str(choice.get("text") or "")
        n_tokens = int((data.get("usage") or {}).get("completion_tokens") or self.count_tokens(text))
        matched = choice.get("stop_reason")
        if choice.get("finish_reason") == "length":
            return Completion(text, n_tokens, "length")
        if isinstance(matched, str) and matched in STOP_TAGS:
            return Completion(text + matched, n_tokens, "stop", matched)
        return Completion(text, n_tokens, "eos")

    def close(self) -> None:
        self.client.close()
