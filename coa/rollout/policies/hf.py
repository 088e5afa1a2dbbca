"""Hugging Face ``generate`` as a policy: concurrent episodes' requests micro-batched into one call.

Requests wait in a queue; a batcher task takes up to ``max_batch`` of them with the same sampling
parameters (after a short ``window_s`` for the others to arrive), left-pads their prompt ids into
one ``generate`` call that runs in a worker thread, and hands each request its own ids. While a
batch generates, tools run and new requests queue, so the next batch starts full.

Generation stops on the single-token stop tags (each tag is one id of the CoA tokenizers) and on
the end-of-turn ids; a tokenizer without tag tokens stops on the stop strings. Logprobs are those
of the sampled ids under the distribution they were drawn from: ``log_softmax(logits / T)``, or the
raw logits when greedy.

Under the engine's ``lockstep`` schedule the engine hands the policy whole waves
(:meth:`HFPolicy.generate_wave`), whose batches depend on the wave alone, not on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import deque
from collections.abc import Sequence
from typing import Any

from coa.resources import generation_heap
from coa.rollout.policy import STOP_TAGS, Codec, Generation, Sampling


@dataclasses.dataclass
class _Request:
    prompt_ids: list[int]
    max_new_tokens: int
    sampling: Sampling
    future: asyncio.Future[Generation]


class HFPolicy:
    """A local ``transformers`` causal LM (CPU or GPU), batched across episodes."""

    def __init__(
        self, model: str, *, device: str | None = None, max_batch: int = 32, window_s: float = 0.002
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = model
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device == "cuda" else torch.float32
        loaded: Any = AutoModelForCausalLM.from_pretrained(model, dtype=dtype)
        self.model = loaded.to(self.device).eval()
        eos = self.model.generation_config.eos_token_id
        self.codec = Codec(AutoTokenizer.from_pretrained(model), eos if isinstance(eos, list) else [eos])
        self.max_batch = max_batch
        self.window_s = window_s
        self.calls = 0
        self._pending: deque[_Request] = deque()
        self._wake: asyncio.Event | None = None
        self._batcher: asyncio.Task[None] | None = None

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "trainer",
        max_batch: int = 32,
        window_s: float = 0.002,
    ) -> HFPolicy:
        """A policy on a model already in memory (an RL trainer's own weights), not loaded from a folder.

        The model is used as it is (its device, dtype and train/eval mode are the caller's).
        """
        policy = cls.__new__(cls)
        policy.name = name
        policy.device = str(model.device)
        policy.model = model
        eos = model.generation_config.eos_token_id
        policy.codec = Codec(tokenizer, eos if isinstance(eos, list) else [eos])
        policy.max_batch, policy.window_s, policy.calls = max_batch, window_s, 0
        policy._pending, policy._wake, policy._batcher = deque(), None, None
        return policy

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._batcher = asyncio.create_task(self._serve())
        self._batcher.add_done_callback(self._batcher_ended)

    def _batcher_ended(self, task: asyncio.Task[None]) -> None:
        """A batcher that died hands its error to every waiting request instead of leaving them hung."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        for request in self._pending:
            if not request.future.done():
                request.future.set_exception(RuntimeError(f"the HF policy's batcher failed: {error!r}"))
        self._pending.clear()

    async def stop(self) -> None:
        if self._batcher is not None:
            self._batcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._batcher
        for request in self._pending:
            request.future.cancel()
        self._pending.clear()
        self._batcher = self._wake = None

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        if self._wake is None:
            raise RuntimeError("HFPolicy.generate before start(): run it through the rollout engine")
        if self._batcher is not None and self._batcher.done():
            raise RuntimeError("the HF policy's batcher has stopped; no request would be served")
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(list(prompt_ids), max_new_tokens, sampling, future))
        self._wake.set()
        return await future

    async def _serve(self) -> None:
        assert self._wake is not None
        while True:
            # Clear before waiting and wait until there is work: a wake-up set while the previous
            # batch generated must not start a batch of nothing (that killed the batcher and left
            # every later request waiting forever).
            while not self._pending:
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(self.window_s)  # let the other ready episodes queue their requests
            batch = self._take()
            try:
                results = await asyncio.to_thread(
                    self.generate_batch,
                    [r.prompt_ids for r in batch],
                    [r.max_new_tokens for r in batch],
                    batch[0].sampling,
                )
            except Exception as e:  # noqa: BLE001 - handed to the episodes that asked
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(e)
                continue
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)

    async def generate_wave(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], sampling: Sampling
    ) -> list[Generation]:
        """A wave of requests (the engine's ``lockstep``): sorted by length (a stable sort, so ties
        keep the wave's order), cut into batches of ``max_batch``, decoded one batch after another;
        the generations come back in the wave's order. The batches depend on the wave alone."""
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[Generation | None] = [None] * len(prompts)
        for at in range(0, len(order), self.max_batch):
            rows = order[at : at + self.max_batch]
            batch = await asyncio.to_thread(
                self.generate_batch, [prompts[i] for i in rows], [max_new_tokens[i] for i in rows], sampling
            )
            for i, generation in zip(rows, batch, strict=True):
                out[i] = generation
        return [g for g in out if g is not None]

    def _take(self) -> list[_Request]:
        """Up to ``max_batch`` waiting requests sampled like the oldest one, oldest first."""
        head = self._pending[0].sampling
        batch: list[_Request] = []
        rest: deque[_Request] = deque()
        while self._pending:
            request = self._pending.popleft()
            (batch if request.sampling == head and len(batch) < self.max_batch else rest).append(request)
        self._pending.extendleft(reversed(rest))
        return batch

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], sampling: Sampling
    ) -> list[Generation]:
        """One left-padded ``generate`` call: a generation per prompt, each cut at its own budget."""
        import torch

        self.calls += 1
        codec = self.codec
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), codec.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            attention[row, width - len(prompt) :] = 1
        kwargs: dict[str, Any] = {
            "max_new_tokens": max(max_new_tokens),
            "eos_token_id": sorted(codec.eos_ids | set(codec.stop_ids)),
            "pad_token_id": codec.pad_id,
            "return_dict_in_generate": True,
            "output_logits": True,
            # Never compiled: with a static cache transformers would compile the forward with CUDA
            # graphs on a GPU, which fail in the worker thread generation runs in (and recompile for
            # each length).
            "disable_compile": True,
            # The weights are whole on this rank (RL on several ranks generates inside
            # coa.rl.ranks.generation_model: ZeRO-3 gathered, FSDP2 unsharded), so no decoding step
            # needs another rank. transformers turns synced_gpus on for an FSDP or ZeRO-3 model, and
            # then every step all-reduces "unfinished" across ranks: ranks whose episodes take
            # different numbers of generate calls (turns, refills) would wait on each other forever.
            "synced_gpus": False,
        }
        if self.device.startswith("cpu"):
            # One cache of prompt + max_new_tokens positions per call, not a cache re-allocated a
            # position larger at every decode step (the heap's holes: coa.resources.generation_heap).
            # CPU only: an RL trainer's model under bf16 mixed precision runs its forward in autocast,
            # which gives fp32 keys (RoPE) and bf16 values, and a static cache holds one dtype (the
            # H200's RL step failed in `index_copy_`); CUDA's caching allocator has no such holes.
            kwargs["cache_implementation"] = "static"
        if not codec.single_token_stops:
            kwargs |= {"stop_strings": list(STOP_TAGS), "tokenizer": codec.tokenizer}
        if sampling.greedy:
            kwargs |= {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        else:
            kwargs |= {"do_sample": True, "temperature": sampling.temperature}
            kwargs |= {"top_p": sampling.top_p, "top_k": sampling.top_k}  # 0 = no top-k cut
        with torch.inference_mode(), generation_heap():
            out = self.model.generate(
                input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs
            )
            new = out.sequences[:, width:]
            scale = 1.0 if sampling.greedy else sampling.temperature
            steps = [
                torch.log_softmax(logits.float() / scale, dim=-1).gather(1, new[:, t : t + 1]).squeeze(1)
                for t, logits in enumerate(out.logits)
            ]
            logprobs = torch.stack(steps, dim=1).tolist() if steps else [[] for _ in prompts]
        ids = new.tolist()
        return [codec.cut(i, lp, n) for i, lp, n in zip(ids, logprobs, max_new_tokens, strict=True)]
