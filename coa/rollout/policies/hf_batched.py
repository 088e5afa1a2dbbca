"""Continuous batching in process as a policy: episodes' generations join one running batch.

The same step loop as ``python -m coa.serve`` (:class:`~coa.serve.engine.ContinuousBatcher`), on a
model in this process: an RL trainer's own weights (:meth:`HFBatchedPolicy.from_model`, no second
copy, nothing to sync) or a folder. Unlike :class:`~coa.rollout.policies.hf.HFPolicy`, which gathers
the waiting requests into one padded ``generate`` call and makes later ones wait for the whole
call, a generation that arrives here joins the running batch at the next decode step and leaves it
as soon as it stops, so a short turn never waits for a long one.

Stops: the single-token stop tags and the end-of-turn ids (each kept, then cut by
:meth:`Codec.cut`); a tokenizer without tag tokens stops on the stop strings. Logprobs are
``log_softmax(logits / T)`` of the sampled id, raw when greedy (as :class:`HFPolicy`). The worker
thread runs between :meth:`start` and :meth:`stop` only: a trainer that updates the weights in
between must do it outside an engine run (the sync RL loop does).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from coa.rollout.policy import STOP_TAGS, Codec, Generation, Sampling
from coa.serve.engine import ContinuousBatcher, GenRequest


class HFBatchedPolicy:
    """A local ``transformers`` causal LM generating on continuous batching."""

    def __init__(self, model: str, *, device: str | None = None, max_batch: int = 256) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = model
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        loaded: Any = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
        self._setup(loaded.to(device).eval(), AutoTokenizer.from_pretrained(model), max_batch)

    @classmethod
    def from_model(
        cls, model: Any, tokenizer: Any, *, name: str = "trainer", max_batch: int = 256
    ) -> HFBatchedPolicy:
        """A policy on a model already in memory, used as it is (device, dtype and mode are the caller's)."""
        policy = cls.__new__(cls)
        policy.name = name
        policy._setup(model, tokenizer, max_batch)
        return policy

    def _setup(self, model: Any, tokenizer: Any, max_batch: int) -> None:
        self.model = model
        eos = model.generation_config.eos_token_id
        self.codec = Codec(tokenizer, eos if isinstance(eos, list) else [eos])
        self.max_batch = max_batch
        self.batcher = ContinuousBatcher(model, max_batch=max_batch, name=f"hf_batched:{self.name}")
        self._stop_check: Any = None
        if not self.codec.single_token_stops:
            codec = self.codec

            def stop_check(ids: list[int]) -> str | None:
                tail = codec.decode(ids[-16:])
                return next((t for t in STOP_TAGS if t in tail), None)

            self._stop_check = stop_check

    @property
    def steps(self) -> int:
        """Decode steps run so far (one forward over the whole running batch each)."""
        return self.batcher.steps

    async def start(self) -> None:
        self.batcher.start()

    async def stop(self) -> None:
        await asyncio.to_thread(self.batcher.stop)

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenRequest] = loop.create_future()

        def done(r: GenRequest) -> None:
            loop.call_soon_threadsafe(_settle, future, r)

        request = GenRequest(
            prompt=list(prompt_ids),
            max_tokens=max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            stop_ids=frozenset(self.codec.stop_ids),
            eos_ids=self.codec.eos_ids,
            stop_check=self._stop_check,
            logprobs=0,
            done=done,
        )
        self.batcher.submit(request)
        result = await future
        if result.finish == "abort":
            raise RuntimeError(f"the hf_batched policy's batcher ended the request: {result.error}")
        generation = self.codec.cut(result.ids, result.token_logprobs, max_new_tokens)
        return dataclasses.replace(generation, version=result.version_first)


def _settle(future: asyncio.Future[GenRequest], request: GenRequest) -> None:
    if not future.done():
        future.set_result(request)
