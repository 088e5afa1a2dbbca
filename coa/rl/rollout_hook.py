"""TRL's rollout hook for GRPO: where each generation batch's episodes come from, what TRL gets back,
and the rollout rows on disk.

:class:`Rollouts` is the ``rollout_func`` :mod:`coa.rl.grpo` hands ``GRPOTrainer``: it generates
on ``rl.rollout.backend`` (HF generate or continuous batching on the trainer's weights, or a
completions server that gets the weights pushed before each generation batch), or takes the async
producer's groups, and returns the kept groups' sampled ids, environment mask and behaviour
logprobs. On several ranks (:mod:`coa.rl.ranks`) every rank generates its own groups on the whole
model (ZeRO-3's shards gathered), rank 0 alone pushes the weights to a server while the others wait
at a barrier, and rank 0 writes every rank's rows. :class:`RolloutWriter` writes each batch's
``rollout.v1`` rows to ``rollouts/step-NNNNNN.parquet``; :func:`read_rollouts` joins them at the end
of a run and :func:`drop_rollouts_after` removes those a resumed run generates again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from coa.rl.config import RLError, RLRunConfig
from coa.rl.ranks import gather_all, generation_model, rank_of, refill_decision
from coa.rl.rewards import TERMS
from coa.rl.rollouts import RolloutSource, pool_tallies, stats_of, train_mask
from coa.rollout import Policy

ROLLOUTS_DIR = "rollouts"
"""The folder of a run's per-batch rollout chunks."""

PolicyFactory = Callable[[Any, Any], Policy]
"""``factory(model, tokenizer)``: a policy replacing the HF one on the trainer's weights (tests)."""


class Rollouts:
    """TRL's rollout hook: one completion per received prompt, in groups of ``group_size``.

    It generates on ``rl.rollout.backend`` (sync), or takes the async producer's groups, writes
    every episode's rows and hands TRL the kept groups' sampled ids, env mask and behaviour
    logprobs. ``stats`` totals the time the trainer spent in it (its idle time), weight pushes and
    stale drops over this call of the run.
    """

    def __init__(
        self,
        source: RolloutSource,
        writer: RolloutWriter,
        config: RLRunConfig,
        out: Path,
        policy_factory: PolicyFactory | None,
    ) -> None:
        self.source, self.writer, self.config = source, writer, config
        self.policy_factory = policy_factory
        self.sync: Any = None
        self.endpoint: Any = None
        self.producer: Any = None
        self.restored: dict[str, Any] | None = None
        """The async producer's state in the checkpoint a run resumes from (:mod:`coa.rl.resume`)."""
        self.stats: dict[str, float] = {"hook_s": 0.0, "batches": 0.0, "stale_dropped": 0.0}
        self.stats |= {"groups_trained": 0.0, "staleness_max": 0.0, "staleness_sum": 0.0}
        self.stats |= {"episodes": 0.0, "groups_generated": 0.0, "truncated": 0.0}
        if config.rollout.backend == "server":
            from coa.rl.replicas import ReplicaSync, replica_endpoints
            from coa.rl.server import WeightSync, server_endpoint

            self.endpoint = server_endpoint(config)
            folder = Path(config.rollout.sync_dir) if config.rollout.sync_dir else out / "weight_sync"
            kw: dict[str, Any] = {
                "pause_mode": config.rollout.pause_mode,
                "adapter": config.adapter_sync,
                # sync: each batch is done before the next push; async: a group more than max_staleness
                # generation batches old is never trained
                "retire_after": 1
                if config.mode == "sync"
                else (config.max_staleness + 1) * config.steps_per_generation,
            }
            endpoints = replica_endpoints(self.endpoint)
            if len(endpoints) > 1:  # every push to each replica; requests spread over them
                self.sync = ReplicaSync(endpoints, folder, **kw)
            else:
                self.sync = WeightSync(self.endpoint, folder, **kw)
            self.sync.check()
            if (
                config.is_correction == "tis"
            ):  # TIS divides by the engine's logprobs: they must be the sampled ones
                self.sync.engine.refuse_tis(config.temperature)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        start = time.perf_counter()
        step = int(trainer.state.global_step)
        deadline = getattr(trainer, "coa_deadline", None)
        if self.config.mode == "async" and trainer.accelerator.num_processes > 1:
            raise RLError(
                "rl.mode: async runs single-process (one producer feeds one trainer); use rl.mode: sync on "
                "several ranks"
            )
        with generation_model(trainer) as model:  # every rank, together (ZeRO-3 gathers here)
            if self.sync is not None and self.sync.version != step:
                # rank 0 pushes the whole model; the others wait for it at the barrier
                if trainer.accelerator.is_main_process:
                    self.sync.push(model, step)
                trainer.accelerator.wait_for_everyone()
                if not trainer.accelerator.is_main_process:  # the engine now holds rank 0's push
                    self.sync.adopt(step)
            if self.config.mode == "async":
                if self.producer is None:
                    from coa.rl.producer import GroupProducer

                    self.producer = GroupProducer(self.source, self._server_policy(trainer))
                    if self.restored is not None:  # the checkpoint's queue and cursor (coa.rl.resume)
                        self.producer.restore(self.restored)
                    self.producer.start()
                batch = self.producer.take(step, deadline)
            else:
                batch = self._sync_batch(prompts, trainer, model, step, deadline)
        # every rank's episodes (in rank order) and batch tallies, in one collective
        gathered = gather_all(trainer, [(batch.rows, batch.tallies)])
        if trainer.is_world_process_zero():
            self.writer.write(step, [row for rows, _ in gathered for row in rows])
        stats = dict(batch.stats)
        if len(gathered) > 1:  # the batch's metrics over every rank: counts pooled, not means of means
            stats |= stats_of(pool_tallies([tallies for _, tallies in gathered]))
        for key, value in stats.items():
            trainer._metrics["train"][key].append(value)
        out = self._trl_batch(batch)
        elapsed = time.perf_counter() - start
        trainer._metrics["train"]["rollout/hook_s"].append(elapsed)
        self._count(batch, step, elapsed)
        return out

    def _sync_batch(self, prompts: list[Any], trainer: Any, model: Any, step: int, deadline: Any) -> Any:
        rank = rank_of(trainer)
        requested = [str(p) for p in prompts]
        # the batch's prompts on every rank: a rank's refills never repeat another rank's groups
        everywhere = gather_all(trainer, list(dict.fromkeys(requested)))
        decide = refill_decision(trainer)  # rank 0's clock decides every rank's refill rounds
        if self.sync is not None and self.policy_factory is None:
            policy = self._server_policy(trainer)
            return self.source.batch(requested, policy, step, deadline, rank, everywhere, decide)
        policy = policy_on_weights(
            model, trainer.processing_class, self.config, self.policy_factory, version=step
        )
        was_training = model.training
        model.eval()
        try:
            return self.source.batch(requested, policy, step, deadline, rank, everywhere, decide)
        finally:
            model.train(was_training)

    def _server_policy(self, trainer: Any) -> Policy:
        from coa.rollout import Codec
        from coa.rollout.policies.endpoint import EndpointPolicy

        if self.policy_factory is not None:
            model = trainer.accelerator.unwrap_model(trainer.model)
            return self.policy_factory(model, trainer.processing_class)
        eos = trainer.accelerator.unwrap_model(trainer.model).generation_config.eos_token_id
        codec = Codec(trainer.processing_class, eos if isinstance(eos, list) else [eos])
        # each rank its own stream: unseeded or equally seeded requests repeat samples
        seed = self.config.seed + int(trainer.state.global_step) + 1_000_003 * rank_of(trainer)[0]
        syncs = getattr(self.sync, "syncs", None)
        if syncs is not None:  # several replicas: each its own client (and ledger), in turn
            from coa.rl.replicas import ReplicaPolicy

            return ReplicaPolicy(
                [
                    EndpointPolicy(
                        s.endpoint,
                        codec,
                        max_connections=s.endpoint.max_concurrency,
                        engine=s.engine,
                        seed=seed + 7919 * i,
                    )
                    for i, s in enumerate(syncs)
                ]
            )
        return EndpointPolicy(
            self.endpoint,
            codec,
            max_connections=self.endpoint.max_concurrency,
            engine=self.sync.engine if self.sync is not None else None,
            seed=seed,
        )

    def _trl_batch(self, batch: Any) -> dict[str, Any]:
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
        for name in TERMS:
            out[f"reward_{name}"] = []
        for group in batch.groups:
            for episode, reward in zip(group.episodes, group.rewards, strict=True):
                out["prompt_ids"].append(list(episode.prompt_ids))
                out["completion_ids"].append(list(episode.completion_ids))
                # behaviour logprobs; None (NaN to TRL) on environment ids: no TIS weight there
                out["logprobs"].append([None if lp is None else float(lp) for lp in episode.logprobs])
                out["env_mask"].append(train_mask(episode, self.config.mask_truncated))
                for name in TERMS:
                    out[f"reward_{name}"].append(reward.term(name))
        return out

    def _count(self, batch: Any, step: int, elapsed: float) -> None:
        from coa.rl.producer import staleness

        self.stats["hook_s"] += elapsed
        self.stats["batches"] += 1
        self.stats["stale_dropped"] += batch.stats.get("async/stale_dropped", 0.0)
        self.stats["episodes"] += batch.tallies.get("episodes", 0.0)
        self.stats["groups_generated"] += batch.tallies.get("groups", 0.0)
        self.stats["truncated"] += batch.tallies.get("truncated", 0.0)
        ages = [staleness(g, step, self.config.steps_per_generation) for g in batch.groups]
        self.stats["groups_trained"] += len(ages)
        self.stats["staleness_sum"] += sum(ages)
        self.stats["staleness_max"] = max(self.stats["staleness_max"], float(max(ages, default=0)))

    def close(self) -> None:
        """Stop the async producer (if any); remove the weight files pushed (the server has loaded them)."""
        if self.producer is not None:
            self.producer.stop()
            self.producer = None
        if self.sync is not None:
            self.sync.clean()

    def summary(self, runtime: float, trainer: Any = None) -> dict[str, float]:
        """What RL's result reports about the rollouts of this call, over every rank of ``trainer``
        (a collective there: every rank calls it): counts add up, the idle time is the mean rank's."""
        mine = dict(self.stats) | {"idle_share": self.stats["hook_s"] / runtime if runtime > 0 else 0.0}
        if self.sync is not None:
            mine |= {"weight_syncs": float(self.sync.pushes), "weight_sync_s": self.sync.seconds}
            # completions whose engine-reported version disagreed with the client's stamp (SGLang reports)
            mine["weight_version_mismatches"] = float(self.sync.mismatches())
        every = gather_all(trainer, [mine]) if trainer is not None else [mine]
        s = {k: sum(r.get(k, 0.0) for r in every) for k in mine}  # rank 0 alone pushes: its syncs
        s["staleness_max"] = max(r["staleness_max"] for r in every)
        ranks = len(every)
        groups = max(1.0, s["groups_trained"])
        return {
            "trainer_idle_s": round(s["hook_s"] / ranks, 3),
            "trainer_idle_share": round(s["idle_share"] / ranks, 4),
            "staleness_mean": round(s["staleness_sum"] / groups, 4),
            "staleness_max": s["staleness_max"],
            "stale_dropped_groups": s["stale_dropped"],
            "stale_dropped_share": round(s["stale_dropped"] / (s["stale_dropped"] + groups), 4),
            "groups_trained": s["groups_trained"],
            "groups_generated": s["groups_generated"],
            "episodes": s["episodes"],
            "truncated_share": round(s["truncated"] / max(1.0, s["episodes"]), 4),
            "weight_syncs": s.get("weight_syncs", 0.0),
            "weight_sync_s": round(s.get("weight_sync_s", 0.0), 3),
            "weight_version_mismatches": s.get("weight_version_mismatches", 0.0),
        }


def policy_on_weights(
    model: Any, tokenizer: Any, config: RLRunConfig, policy_factory: PolicyFactory | None, version: int = 0
) -> Policy:
    """The policy on the trainer's weights: the test's factory, else ``hf_batched`` continuous batching
    when configured (reporting ``version``, the trainer's step), else HF generate (also the held-out
    score's policy under backend=server)."""
    if policy_factory is not None:
        return policy_factory(model, tokenizer)
    if config.rollout.backend == "hf_batched":
        from coa.rollout.policies.hf_batched import HFBatchedPolicy

        batched = HFBatchedPolicy.from_model(model, tokenizer, max_batch=config.generation_batch)
        batched.batcher.set_version(version)
        return batched
    from coa.rollout.policies.hf import HFPolicy

    return HFPolicy.from_model(model, tokenizer, max_batch=config.generation_batch)


class RolloutWriter:
    """Each generation batch's ``rollout.v1`` rows to ``step-NNNNNN.parquet`` (written atomically)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, step: int, rows: list[dict[str, Any]]) -> None:
        import pyarrow.parquet as pq

        import schemas

        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"step-{step:06d}.parquet"
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(schemas.ROLLOUT.from_rows(rows), tmp)
        tmp.replace(path)


def read_rollouts(folder: Path) -> pa.Table:
    """Every chunk of a run's rollout rows, in step order, as one ``rollout.v1`` table."""
    import pyarrow.parquet as pq

    import schemas

    chunks = sorted(folder.glob("step-*.parquet"))
    if not chunks:
        return schemas.ROLLOUT.empty_table()
    return schemas.ROLLOUT.conform(pa.concat_tables([pq.read_table(c) for c in chunks]))


def drop_rollouts_after(folder: Path, step: int) -> None:
    """Remove the rollout chunks generated at or after ``step`` (a resumed run makes them again)."""
    for chunk in folder.glob("step-*.parquet") if folder.is_dir() else []:
        if int(chunk.stem.split("-")[1]) >= step:
            chunk.unlink()
