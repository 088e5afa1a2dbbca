"""Asynchronous RL: a producer thread keeps generating groups from the server while the trainer trains.

:class:`GroupProducer` runs the rollout engine in a thread of its own (its own asyncio loop, one
:class:`~coa.rollout.policies.endpoint.EndpointPolicy` session): it picks prompts in a seeded
order, runs the ``group_size`` episodes of each as soon as a slot is free (at most
``groups_in_flight`` groups generating or waiting to be trained), scores them and queues them. The
trainer's rollout hook (:meth:`GroupProducer.take`) pushes its weights to the server first (so the
groups started afterwards sample with them), then takes finished groups, oldest first, until it
holds ``prompts_per_step`` groups to train:

* a group more than ``max_staleness`` policy versions (generation batches) behind the trainer is
  **dropped as stale** (its rows kept with ``kept`` false, counted as ``async/stale_dropped``): no
  sample beyond the bound is ever trained. A group's version is the oldest of its generations'
  (a generation that spans a weight update under ``pause_mode: keep`` reports its first);
* dynamic sampling as in sync mode: a group whose rewards are all equal is set aside; after
  ``prompts_per_step * (1 + 2 * max_refill_rounds)`` fresh groups (the sync mode's refill budget)
  the batch is topped up with set-aside ones (the shortfall logged);
* time the trainer waits for groups is its idle time (``async/wait_s``).

**Resume.** The n-th prompt the producer draws is a function of the seed and n alone (pass ``n //
prompts`` of the prompts, shuffled by a generator keyed by the seed and the pass). Each checkpoint
holds the producer's state (:meth:`GroupProducer.snapshot`, :data:`PRODUCER_STATE_FILE`, written into
the checkpoint's staging folder by :mod:`coa.rl.resume`, so atomic with it): the draws made, the
groups finished but not yet trained (their episodes and rewards, in the order they finished) and
the draws still generating. A resumed producer (:meth:`GroupProducer.restore`) queues the finished
groups again as they were, generates the running draws again first (their prompts, not new ones)
and draws on from the saved cursor: no group is lost, none is trained twice, and the prompts drawn
are the uninterrupted run's. What stays timing-bound (as in an uninterrupted run, whose two runs
differ too): the order groups finish in, so which group a step takes, the weight version each
generation samples with, and so each group's episodes and its staleness drop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import queue
import random
import threading
import time
from typing import Any

from coa.rl.rewards import Reward
from coa.rl.rollouts import Group, RolloutBatch, RolloutSource, batch_tallies, rollout_row, stats_of
from coa.rollout.engine import EpisodeSpec, run_episode
from coa.rollout.episode import Episode, ToolCall
from coa.rollout.policy import Policy

PRODUCER_STATE_FILE = "producer_state.json"
"""The async producer's state in a checkpoint folder (see the module doc)."""

log = logging.getLogger("coa.rl")


def staleness(group: Group, step: int, steps_per_generation: int) -> int:
    """Policy versions (generation batches) the group's oldest generation is behind ``step``."""
    return max(0, step - group.version(step)) // steps_per_generation


class GroupProducer:
    """Groups generated continuously from ``policy`` (a server) in a background thread."""

    def __init__(self, source: RolloutSource, policy: Policy) -> None:
        self.source = source
        self.policy = policy
        self.params = source.params
        self.in_flight = self.params.groups_in_flight
        self.ready: queue.Queue[tuple[int, Group] | BaseException] = queue.Queue()
        self._slots = threading.Semaphore(self.in_flight)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the draws, running and queued groups, as one snapshot sees them
        self.drawn = 0
        """Prompts drawn so far (the cursor): draw n is :meth:`prompt_of` (n)."""
        self._running: dict[int, str] = {}  # draw -> prompt, generating
        self._queued: dict[int, Group] = {}  # draw -> group, finished and not yet taken (finish order)
        self._redo: list[int] = []  # restored running draws, generated again before new ones
        self._passes: dict[int, list[str]] = {}
        self._thread: threading.Thread | None = None
        self.totals = {"stale_dropped": 0, "groups_taken": 0, "wait_s": 0.0}

    # ------------------------------------------------------------------ the producer thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="coa-rl-producer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop generating; running episodes are abandoned (their groups are never trained)."""
        self._stop.set()
        for _ in range(self.in_flight):
            self._slots.release()  # wake the loop if it waits for a slot
        if self._thread is not None:
            self._thread.join(timeout=60)
        self._thread = None

    def prompt_of(self, draw: int) -> str:
        """The prompt of the ``draw``-th draw: a function of the seed and ``draw`` alone."""
        order = self.source.order
        index = draw // len(order)
        if index not in self._passes:
            shuffled = list(order)
            key = hashlib.sha256(f"{self.params.seed}:async:pass:{index}".encode()).hexdigest()
            random.Random(key).shuffle(shuffled)
            self._passes = {index: shuffled}
        return self._passes[index][draw % len(order)]

    def _next_draw(self) -> tuple[int, str]:
        with self._lock:
            if self._redo:
                draw = self._redo.pop(0)
                prompt = self._running[draw]
            else:
                draw, prompt = self.drawn, self.prompt_of(self.drawn)
                self.drawn += 1
                self._running[draw] = prompt
            return draw, prompt

    # ------------------------------------------------------------------ resume

    def snapshot(self) -> dict[str, Any]:
        """What a checkpoint saves (JSON): the cursor, the running draws, the finished untrained groups.

        Called on the trainer's thread between steps (while the producer keeps generating): one lock
        makes the three agree, so a group is in exactly one of them or already taken."""
        with self._lock:
            return {
                "drawn": self.drawn,
                "running": [[d, p] for d, p in sorted(self._running.items())],
                "queued": [[d, group_to_json(g)] for d, g in self._queued.items()],
            }

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`snapshot` (before :meth:`start`): its finished groups queued again in
        their order, its running draws generated again first, the draws going on from its cursor."""
        if self._thread is not None:
            raise RuntimeError("restore the producer before it starts")
        self.drawn = int(state["drawn"])
        self._running = {int(d): str(p) for d, p in state["running"]}
        self._redo = sorted(self._running)
        for d, g in state["queued"]:
            group = group_from_json(g)
            self._slots.acquire(blocking=False)  # a queued group holds its slot until it is taken
            self._queued[int(d)] = group
            self.ready.put((int(d), group))

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as e:  # noqa: BLE001 - handed to the trainer's thread
            self.ready.put(e)

    async def _produce(self) -> None:
        await self.policy.start()
        tasks: set[asyncio.Task[None]] = set()
        try:
            while not self._stop.is_set():
                await asyncio.to_thread(self._slots.acquire)
                if self._stop.is_set():
                    break
                task = asyncio.create_task(self._group(*self._next_draw()))
                tasks.add(task)
                task.add_done_callback(tasks.discard)  # a group's failure is queued for the trainer
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.policy.stop()

    async def _group(self, draw: int, prompt_id: str) -> None:
        source, g = self.source, self.params.group_size
        try:
            ids = source.prompt_ids(prompt_id, self.policy.codec)
            episodes: list[Episode] = list(
                await asyncio.gather(
                    *(
                        run_episode(
                            EpisodeSpec(prompt_id, ids, k), self.policy, source.toolbox, source.config
                        )
                        for k in range(g)
                    )
                )
            )
            group = await asyncio.to_thread(source.score_group, prompt_id, episodes, self.policy.codec)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - the trainer raises it
            self.ready.put(e)
            return
        group.draw = draw
        with self._lock:
            self._running.pop(draw, None)
            self._queued[draw] = group
            self.ready.put((draw, group))

    # ------------------------------------------------------------------ the trainer's side

    def _get(self) -> Group:
        start = time.perf_counter()
        while True:
            try:
                item = self.ready.get(timeout=1.0)
                break
            except queue.Empty:
                if self._thread is None or not self._thread.is_alive():
                    raise RuntimeError("the async RL producer stopped without an error") from None
        self.totals["wait_s"] += time.perf_counter() - start
        self._slots.release()
        if isinstance(item, BaseException):
            raise item
        draw, group = item
        with self._lock:
            self._queued.pop(draw, None)
        return group

    def take(self, step: int, deadline: float | None = None) -> RolloutBatch:
        """``prompts_per_step`` groups within ``max_staleness`` of ``step`` (see the module doc)."""
        p = self.params
        start = time.perf_counter()
        wait_before = self.totals["wait_s"]
        wanted = p.prompts_per_step
        fresh_budget = wanted * (1 + 2 * p.max_refill_rounds) if p.dynamic_sampling else 0
        kept: list[Group] = []
        aside: list[Group] = []  # zero-variance groups of this batch, for its top-up
        seen: list[Group] = []
        stale: list[Group] = []
        while len(kept) < wanted:
            group = self._get()
            if staleness(group, step, p.steps_per_generation) > p.max_staleness:
                stale.append(group)
                continue
            seen.append(group)
            selective = len(seen) <= fresh_budget and (deadline is None or time.perf_counter() < deadline)
            if selective and group.zero_variance:
                aside.append(group)
                continue
            kept.append(group)
            if not selective and aside:  # out of budget: the set-aside groups fill the batch
                fill = aside[: wanted - len(kept)]
                kept += fill
                aside = aside[len(fill) :]
        shortfall = sum(gr.zero_variance for gr in kept) if p.dynamic_sampling else 0
        chosen_ids = {id(gr) for gr in kept}
        every = seen + stale
        rows = [
            rollout_row(gr, k, step, id(gr) in chosen_ids, p.mask_truncated, step)
            for gr in every
            for k in range(len(gr.episodes))
        ]
        ages = [staleness(gr, step, p.steps_per_generation) for gr in kept]
        self.totals["stale_dropped"] += len(stale)
        self.totals["groups_taken"] += len(kept)
        tallies = batch_tallies(every, seen, shortfall, start)
        stats = stats_of(tallies) | {
            "async/staleness_mean": sum(ages) / len(ages),
            "async/staleness_max": float(max(ages)),
            "async/stale_dropped": float(len(stale)),
            "async/stale_share": len(stale) / len(every),
            "async/wait_s": self.totals["wait_s"] - wait_before,
        }
        return RolloutBatch(kept, rows, stats, tallies)


def group_to_json(group: Group) -> dict[str, Any]:
    """A finished group as JSON (episodes and rewards exactly: floats round-trip through JSON)."""
    return dataclasses.asdict(group)


def group_from_json(data: dict[str, Any]) -> Group:
    """The group :func:`group_to_json` wrote."""
    episodes = []
    for e in data["episodes"]:
        fields = dict(e)
        fields["pieces"] = [tuple(p) for p in fields["pieces"]]
        fields["tool_calls"] = [ToolCall(**t) for t in fields["tool_calls"]]
        episodes.append(Episode(**fields))
    rewards = [Reward(**r) for r in data["rewards"]]
    draw = data.get("draw")
    return Group(
        data["prompt_id"],
        data["task_id"],
        int(data["group_index"]),
        data["variant"],
        episodes,
        rewards,
        None if draw is None else int(draw),
    )
