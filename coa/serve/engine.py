"""Continuous batching on one causal LM: requests join and leave a running batch between decode steps.

One worker thread owns the model. Every step it admits the requests that arrived (each prefilled on
its own, its KV cache merged into the batch's, left-padded), then runs one decode step over every
running sequence and samples each row with its own parameters (temperature, top-p, top-k, seed,
LoRA adapter), so a request that arrives while others generate waits at most one step, never for
the batch to finish. A row leaves the batch when it samples a stop id or an end-of-sequence id
(that id is kept, as vLLM keeps ``stop_token_ids``), a stop string, or reaches ``max_tokens``.

Why not transformers' own continuous batching (``init_continuous_batching`` / ``generate_batch``,
transformers 5.23): it runs on CPU, but greedy or sampling is one switch for the whole manager,
there is no per-request seed, and no per-request LoRA adapter, which a vLLM-compatible server must
honour. On the tiny Qwen2 of the tests (one thread, 2026-11-25, 32 prompts x 32 greedy tokens, all
sent at once) its first batch took 10 s on a quiet host and 48 s on a loaded one (cache sizing),
later batches 51-76 ms against 22 ms for one padded ``generate`` call; on the loaded host, medians
of 5: ``generate`` 199 ms, transformers' manager 347 ms, this loop 298 ms (it prefills each request
alone and pays for merging caches; what it is for is requests arriving while others run, which one
``generate`` call cannot take in). This loop is plain ``DynamicCache`` tensors, one forward per
decode step.

Logprobs are those of the sampled id under the distribution it was drawn from before the top-k /
top-p cut: ``log_softmax(logits / T)``, the raw ``log_softmax(logits)`` when greedy (the convention
of :class:`~coa.rollout.policies.hf.HFPolicy`; at T = 1 these are vLLM's default raw logprobs).

Weights: :meth:`ContinuousBatcher.pause` (``wait`` lets the running rows finish first, ``keep``
freezes them mid-generation), then new weights copied in (:mod:`coa.serve.weights`) or adapters
loaded, then :meth:`resume`. The weight ``version`` is recorded per request:
the version of its first and of its last token (equal unless a ``keep`` pause updated the weights
under it).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

from coa.resources import generation_heap
from coa.serve.sampling import filtered_probs, left_pad, ranked_logprobs

Finish = Literal["stop", "length", "abort"]
BASE_ADAPTER = "__base__"
"""peft's name for "no adapter" in a mixed-adapter batch."""


@dataclasses.dataclass
class GenRequest:
    """One completion request and, once done, its result."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_ids: frozenset[int] = frozenset()
    eos_ids: frozenset[int] = frozenset()
    stop_check: Callable[[list[int]], str | None] | None = None
    """Called with the generated ids after each token: the stop string it completes, else None."""
    adapter: str | None = None
    logprobs: int | None = None
    """None: no logprobs; n >= 0: each token's logprob, and its n most likely alternatives."""
    prompt_logprobs: int | None = None
    done: Callable[[GenRequest], None] | None = None
    """Called from the worker thread when the request ends (results filled in)."""

    ids: list[int] = dataclasses.field(default_factory=list)
    token_logprobs: list[float] = dataclasses.field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = dataclasses.field(default_factory=list)
    prompt_logprob_values: list[list[tuple[int, float]] | None] = dataclasses.field(default_factory=list)
    finish: Finish | None = None
    stop_reason: int | str | None = None
    error: str | None = None
    version_first: int | None = None
    version_last: int | None = None
    version_spans: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    """``(version, first token index)`` each time the version of the sampled tokens changed."""
    submitted_at: float = 0.0
    first_token_at: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


class _Row:
    """A running sequence: its request, its sampler, how many real tokens its cache holds."""

    def __init__(self, request: GenRequest, length: int) -> None:
        import torch

        self.request = request
        self.length = length  # real tokens in the cache (prompt + generated - the pending one)
        self.generator: Any = None
        if request.seed is not None and not request.greedy:
            self.generator = torch.Generator().manual_seed(request.seed)


class ContinuousBatcher:
    """Runs requests on ``model`` in a worker thread; :meth:`submit` from any thread."""

    def __init__(
        self,
        model: Any,
        *,
        max_batch: int = 256,
        delay_per_token_s: float = 0.0,
        name: str = "coa-batcher",
        raw_logprobs: bool = False,
    ) -> None:
        self.model = model
        self.max_batch = max_batch
        self.delay_per_token_s = delay_per_token_s
        self.raw_logprobs = raw_logprobs  # report logprobs before temperature (vLLM's raw_logprobs mode)
        self.version = 0
        self.steps = 0
        self.name = name
        self._queue: deque[GenRequest] = deque()
        self._admitting: list[GenRequest] = []  # taken from the queue, not yet in the batch
        self._rows: list[_Row] = []
        self._cache: Any = None
        self._mask: Any = None  # [rows, cache length] 1 = real token
        self._next: Any = None  # [rows] the id each row feeds next
        self._cond = threading.Condition()
        self._paused = False
        self._pause_mode: Literal["wait", "keep"] = "wait"
        self._stopping = False
        self._busy = False  # the worker is inside a step (holding the model)
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    # ------------------------------------------------------------------ control (any thread)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """End the worker; requests still queued or running end with finish ``abort``."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None
        self._abort_all("the batcher stopped")

    def submit(self, request: GenRequest) -> None:
        if self.failure is not None:
            raise RuntimeError(f"the batcher's worker failed: {self.failure!r}")
        if self._thread is None or self._stopping:
            raise RuntimeError("the batcher is not running")
        request.submitted_at = time.perf_counter()
        with self._cond:
            self._queue.append(request)
            self._cond.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def running(self) -> int:
        return len(self._rows)

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def pause(self, mode: Literal["wait", "keep"] = "wait", timeout: float | None = None) -> None:
        """Stop generating; return once the model is free to change.

        ``wait``: no new request is admitted, the running ones finish, then the worker idles.
        ``keep``: the worker idles after the current step, the running rows keep their caches and
        continue after :meth:`resume` (on whatever weights are loaded by then).
        """
        with self._cond:
            self._paused, self._pause_mode = True, mode
            self._cond.notify_all()
            ok = self._cond.wait_for(
                lambda: not self._busy and (mode == "keep" or not self._rows) or self._stopping, timeout
            )
        if not ok:
            raise TimeoutError(f"pause ({mode}) did not complete in {timeout} s")

    def abort_running(self, reason: str) -> int:
        """Pause (keep), then end every running request with finish ``abort``; the queue waits for
        :meth:`resume`. The number of requests aborted."""
        self.pause("keep")
        with self._cond:
            running = self._admitting + [r.request for r in self._rows]
            self._rows, self._admitting = [], []
            self._cache = self._mask = self._next = None
        for request in running:
            request.finish, request.error = "abort", reason
            if request.done is not None:
                request.done(request)
        return len(running)

    def retract_running(self) -> int:
        """Pause (keep), then put every running request back at the head of the queue with the ids it
        has: after :meth:`resume` each is prefilled again (prompt + its ids, on the weights loaded by
        then) and continues (SGLang's ``retract``). The number of requests retracted."""
        self.pause("keep")
        with self._cond:
            running = self._admitting + [r.request for r in self._rows]
            self._rows, self._admitting = [], []
            self._cache = self._mask = self._next = None
            self._queue.extendleft(reversed(running))
        return len(running)

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def set_version(self, version: int) -> None:
        self.version = version

    # ------------------------------------------------------------------ the worker

    def _run(self) -> None:
        import torch

        try:
            with torch.inference_mode():
                while True:
                    with self._cond:
                        self._cond.wait_for(self._has_work)
                        if self._stopping:
                            return
                        admit = self._take_admissions()
                        self._admitting = admit
                        self._busy = True
                    try:
                        start = time.perf_counter()
                        with generation_heap():
                            self._step(admit)
                        self._admitting = []
                        if self.delay_per_token_s > 0:
                            time.sleep(max(0.0, self.delay_per_token_s - (time.perf_counter() - start)))
                    finally:
                        with self._cond:
                            self._busy = False
                            self._cond.notify_all()
        except BaseException as e:  # noqa: BLE001 - handed to every waiting request
            self.failure = e
            self._abort_all(f"the batcher's worker failed: {type(e).__name__}: {e}")

    def _has_work(self) -> bool:
        if self._stopping:
            return True
        if self._paused:
            return self._pause_mode == "wait" and bool(self._rows)
        return bool(self._rows or self._queue)

    def _take_admissions(self) -> list[GenRequest]:
        if self._paused:
            return []
        room = self.max_batch - len(self._rows)
        admit = []
        while self._queue and room > 0:
            admit.append(self._queue.popleft())
            room -= 1
        return admit

    def _abort_all(self, reason: str) -> None:
        with self._cond:
            pending = self._admitting + [r.request for r in self._rows] + list(self._queue)
            self._rows, self._queue, self._admitting = [], deque(), []
            self._cache = self._mask = self._next = None
        for request in pending:  # none of them was delivered yet
            request.finish, request.error = "abort", reason
            if request.done is not None:
                request.done(request)

    def _step(self, admit: list[GenRequest]) -> None:
        """Admit new requests (prefill, first token), then one decode step over the older rows."""
        import torch

        old = len(self._rows)
        if old:
            device = self._device()
            positions = torch.tensor([[row.length] for row in self._rows], device=device)
            mask = torch.cat([self._mask, torch.ones((old, 1), dtype=torch.long, device=device)], dim=1)
            logits = self._forward(
                self._next.view(old, 1), mask, positions, self._cache, [r.request for r in self._rows]
            )[:, -1]
            self._mask = mask
            for row in self._rows:
                row.length += 1
            self._sample(self._rows, logits.float())
        for request in admit:
            self._admit(request)
        self.steps += 1
        self._retire()

    def _forward(
        self, ids: Any, mask: Any, positions: Any, cache: Any, requests: Sequence[GenRequest]
    ) -> Any:
        kwargs: dict[str, Any] = {}
        if hasattr(self.model, "peft_config"):  # always name each row's adapter: none is implied
            kwargs["adapter_names"] = [r.adapter or BASE_ADAPTER for r in requests]
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            **kwargs,
        )
        return out.logits

    def _admit(self, request: GenRequest) -> None:
        """Prefill one request alone, sample its first token, merge its cache into the batch."""
        import torch
        from transformers import DynamicCache

        retracted = bool(request.ids)  # re-admitted after a retract: its KV recomputed on these weights
        if not retracted:
            request.version_first = request.version_last = self.version
        n = len(request.prompt) + len(request.ids)
        device = self._device()
        ids = torch.tensor([request.prompt + request.ids], device=device)
        cache = DynamicCache(config=self._config())
        ones = torch.ones((1, n), dtype=torch.long, device=device)
        positions = torch.arange(n, device=device).view(1, n)
        logits = self._forward(ids, ones, positions, cache, [request])[0].float()
        if request.prompt_logprobs is not None and not retracted:
            ranked = ranked_logprobs(
                torch.log_softmax(logits[:-1], dim=-1), ids[0, 1:], request.prompt_logprobs
            )
            request.prompt_logprob_values = [None, *ranked]
        row = _Row(request, n)
        self._sample([row], logits[-1:])
        self._merge(row, cache)

    def _device(self) -> Any:
        """Where the model's weights are: every tensor the batcher builds is made there."""
        return next(self.model.parameters()).device

    def _config(self) -> Any:
        config = self.model.config
        return config.get_text_config() if hasattr(config, "get_text_config") else config

    def _merge(self, row: _Row, cache: Any) -> None:
        """Append a prefilled row to the batch, left-padding whichever side is shorter."""
        import torch
        from transformers import DynamicCache

        new_len = cache.layers[0].keys.shape[-2]
        device = self._device()
        if not self._rows:
            self._cache, self._mask = cache, torch.ones((1, new_len), dtype=torch.long, device=device)
            self._next = torch.tensor([row.request.ids[-1]], device=device)
            self._rows.append(row)
            return
        old_len = self._mask.shape[1]
        width = max(old_len, new_len)
        merged = DynamicCache(config=self._config())
        for layer, (a, b) in enumerate(zip(self._cache.layers, cache.layers, strict=True)):
            keys = torch.cat([left_pad(a.keys, width), left_pad(b.keys, width)], dim=0)
            values = torch.cat([left_pad(a.values, width), left_pad(b.values, width)], dim=0)
            merged.update(keys, values, layer)
        self._cache = merged
        new_mask = torch.ones((1, new_len), dtype=torch.long, device=device)
        self._mask = torch.cat([left_pad(self._mask, width), left_pad(new_mask, width)], dim=0)
        self._next = torch.cat([self._next, torch.tensor([row.request.ids[-1]], device=device)])
        self._rows.append(row)

    def _retire(self) -> None:
        """Finished rows leave the batch; padding columns no row uses any more are cut."""
        import torch

        keep = [i for i, row in enumerate(self._rows) if row.request.finish is None]
        ended = [row.request for row in self._rows if row.request.finish is not None]
        if len(keep) < len(self._rows):
            if not keep:
                self._rows, self._cache, self._mask, self._next = [], None, None, None
            else:
                index = torch.tensor(keep, device=self._mask.device)
                self._rows = [self._rows[i] for i in keep]
                self._mask = self._mask.index_select(0, index)
                self._next = self._next.index_select(0, index)
                unused = int((self._mask.sum(dim=0) == 0).cumprod(dim=0).sum())
                for layer in self._cache.layers:
                    layer.keys = layer.keys.index_select(0, index)[:, :, unused:]
                    layer.values = layer.values.index_select(0, index)[:, :, unused:]
                self._mask = self._mask[:, unused:]
        for request in ended:
            if request.done is not None:
                request.done(request)

    def _sample(self, rows: Sequence[_Row], logits: Any) -> None:
        """Sample each row's next id with its own parameters; record it and its logprob; end rows."""
        import torch

        requests = [row.request for row in rows]
        temps = torch.tensor(
            [r.temperature if not r.greedy else 1.0 for r in requests], device=logits.device
        ).view(-1, 1)
        logprobs_all = torch.log_softmax(logits / temps, dim=-1)
        chosen = torch.argmax(logits, dim=-1)
        sampled = [i for i, r in enumerate(requests) if not r.greedy]
        if sampled:
            index = torch.tensor(sampled, device=logits.device)
            probs = filtered_probs(
                logprobs_all.index_select(0, index),
                [requests[i].top_k for i in sampled],
                [requests[i].top_p for i in sampled],
            )
            free = [j for j, i in enumerate(sampled) if rows[i].generator is None]
            if free:
                draws = torch.multinomial(probs[free], 1).view(-1)
                for j, draw in zip(free, draws.tolist(), strict=True):
                    chosen[sampled[j]] = draw
            for j, i in enumerate(sampled):
                if rows[i].generator is not None:
                    # a seeded row draws on the CPU, where its generator lives: the same draw on any device
                    chosen[i] = int(torch.multinomial(probs[j].cpu(), 1, generator=rows[i].generator))
        reported = torch.log_softmax(logits, dim=-1) if self.raw_logprobs else logprobs_all
        picked = reported.gather(1, chosen.view(-1, 1)).view(-1).tolist()
        ids = chosen.tolist()
        tops: dict[int, list[tuple[int, float]]] = {}
        wide = max((r.logprobs or 0) for r in requests)
        if wide > 0:
            values, indices = torch.topk(reported, wide, dim=-1)
            for i, r in enumerate(requests):
                if r.logprobs:
                    tops[i] = list(
                        zip(indices[i, : r.logprobs].tolist(), values[i, : r.logprobs].tolist(), strict=True)
                    )
        now = time.perf_counter()
        for i, (row, token, logprob) in enumerate(zip(rows, ids, picked, strict=True)):
            request = row.request
            if not request.ids:
                request.first_token_at = now
            if request.version_last != self.version or not request.version_spans:
                request.version_spans.append((self.version, len(request.ids)))
            request.ids.append(token)
            request.version_last = self.version
            if request.logprobs is not None:
                request.token_logprobs.append(logprob)
                request.top_logprobs.append(tops.get(i, []))
            if token in request.stop_ids:
                request.finish, request.stop_reason = "stop", token
            elif token in request.eos_ids:
                request.finish = "stop"
            elif request.stop_check is not None and (hit := request.stop_check(request.ids)) is not None:
                request.finish, request.stop_reason = "stop", hit
            elif len(request.ids) >= request.max_tokens:
                request.finish = "length"
        if self._next is not None and len(self._rows) == len(rows) and rows is self._rows:
            self._next = torch.tensor(ids, device=logits.device)
