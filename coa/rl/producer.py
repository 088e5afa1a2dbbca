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

What the producer does not do: persist its queue. A killed run resumes from its last checkpoint
and the producer starts again from that checkpoint's weights; groups that were queued or running
are generated again (their prompts drawn afresh from the seeded order at the resumed step).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import random
import threading
import time

from coa.rl.rollouts import Group, RolloutBatch, RolloutSource, batch_tallies, rollout_row, stats_of
from coa.rollout.engine import EpisodeSpec, run_episode
from coa.rollout.episode import Episode
from coa.rollout.policy import Policy

log = logging.getLogger("coa.rl")


def staleness(group: Group, step: int, steps_per_generation: int) -> int:
    """Policy versions (generation batches) the group's oldest generation is behind ``step``."""
    return max(0, step - group.version(step)) // steps_per_generation


class GroupProducer:
    """Groups generated continuously from ``policy`` (a server) in a background thread."""

    def __init__(self, source: RolloutSource, policy: Policy, start_step: int) -> None:
        self.source = source
        self.policy = policy
        self.params = source.params
        self.in_flight = self.params.groups_in_flight
        self.ready: queue.Queue[Group | BaseException] = queue.Queue()
        self._slots = threading.Semaphore(self.in_flight)
        self._stop = threading.Event()
        self._rng = random.Random(f"{self.params.seed}:async:{start_step}")
        self._order: list[str] = []
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

    def _next_prompt(self) -> str:
        if not self._order:
            self._order = list(self.source.order)
            self._rng.shuffle(self._order)
        return self._order.pop()

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
                task = asyncio.create_task(self._group(self._next_prompt()))
                tasks.add(task)
                task.add_done_callback(tasks.discard)  # a group's failure is queued for the trainer
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.policy.stop()

    async def _group(self, prompt_id: str) -> None:
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
        self.ready.put(group)

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
        return item

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
