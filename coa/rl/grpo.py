"""GRPO with DAPO's defaults on multi-turn CoA tool rollouts: TRL's ``GRPOTrainer`` + our rollouts,
the RL recipe of the trainer kit (:mod:`coa.train.kit`), beside SFT's (:mod:`coa.train.sft`).

``run_rl(prompts, config, output_dir, resume)`` trains ``config.base_model`` (an SFT model) on an
``rl_prompt.v1`` table and returns :class:`RLResult`. ``python -m coa.rl.grpo --config X.yaml``
runs the same from a file, so a GPU worker runs it under ``accelerate launch``.

**Rollouts.** TRL's ``rollout_func`` hook hands us the prompt ids of a generation batch (each
repeated ``group_size`` times); :class:`~coa.rl.rollouts.RolloutSource` runs the episodes through
the rollout engine, scores them, applies dynamic sampling and returns the kept groups. Where the
episodes are generated is ``rl.rollout.backend``: ``hf`` (HF ``generate`` on the trainer's own
weights, eval mode, no gradient checkpointing: rl-feasibility.md pitfall 1), ``hf_batched``
(continuous batching in process on the same weights) or ``server`` (a completions server speaking
vLLM's token-id protocol, ``python -m coa.serve``; the trainer's weights are pushed to it before
each generation batch, :mod:`coa.rl.server`, versioned by the global step). With ``rl.mode:
async`` (server only) a producer thread keeps generating groups while the trainer trains, and each
batch takes finished groups within ``max_staleness`` versions (:mod:`coa.rl.producer`; queued
groups are not persisted: a resumed run generates them again). ``is_correction: tis`` weights each
trained token by the truncated ratio of trainer to behaviour probability (:mod:`coa.rl.tis`).
TRL trains on the ``prompt_ids`` / ``completion_ids`` we return, exactly the sampled ids;
``env_mask`` (popped by TRL as its tool mask) is 0 on every environment id, so
observations carry no gradient and do not count in the token-mean. Text is never re-tokenized.
The reward functions TRL calls only hand back the terms computed with the rollouts (one function
per term, so each is logged as ``rewards/<term>/mean``).

**Guards.** The entropy TRL logs each step is checked against ``entropy_floor``: a collapse stops
the run with :class:`EntropyCollapse` (a failed check). A run that ends with another number of
optimizer steps than its plan raises :class:`RLStepCountError` and writes no model.

**Held-out score and the reward-hacking alarm**: with ``heldout_eval_steps`` a slice of the
prompts is kept out of training and scored by greedy rollouts on a schedule
(:mod:`coa.rl.heldout`); a rising training reward with a falling held-out score is the alarm
(:mod:`coa.rl.alarm`), logged as a WARNING and reported as ``RLResult.alarm``.

**Checkpoints and resume** are the kit's, as in SFT: ``checkpoints/checkpoint-N`` every
``save_steps``; a resumed run continues from the last one (the config must match, ``rl_plan.json``),
and the rollout rows of steps after that checkpoint are discarded (they are generated again). Each
generation batch's rows go to ``rollouts/step-NNNNNN.parquet`` as it is made; the finished run joins them into
``rollouts.parquet`` (``rollout.v1``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from coa.rl.callbacks import Deadline, EntropyGuard
from coa.rl.config import RL, EntropyCollapse, RLError, RLResult, RLRunConfig
from coa.rl.curves import CURVE_KEYS, curves, plot_curves
from coa.rl.heldout import HeldoutEval, split_prompts
from coa.rl.rewards import TERMS
from coa.rl.rollouts import RolloutSource, train_mask
from coa.rollout import Policy
from coa.train.kit import entry
from coa.train.kit import run as kit
from coa.train.kit.callbacks import StepCounter
from coa.train.kit.run import CHECKPOINTS_DIR

PolicyFactory = Callable[[Any, Any], Policy]
log = logging.getLogger(RL.logger)

MODEL_DIR = kit.MODEL_DIR
ROLLOUTS_DIR = "rollouts"
ROLLOUTS_FILE = "rollouts.parquet"
PLAN_FILE = RL.plan_file
RESULT_FILE = RL.result_file
JUDGE_AUDIT_FILE = "judge_audit.json"
CURVES_PNG = "rl_curves.png"


def select_prompts(prompts: pa.Table, families: Sequence[str] | str | None) -> list[dict[str, Any]]:
    """The rows of the configured families; none left is an error."""
    if isinstance(families, str):
        raise RLError(
            f"rl.families: {families} is resolved by the RL step from an evaluation of the model "
            "(`coa run`, or `coa rl --eval`); a run on its own needs the families named (rl.families: [math])"
        )
    rows = prompts.to_pylist()
    if families is not None:
        rows = [r for r in rows if r["family"] in families]
    if not rows:
        present = sorted({r["family"] for r in prompts.to_pylist()})
        raise RLError(f"no RL prompt of families {list(families or [])}; the prompts hold {present}")
    return rows


def run_rl(
    prompts: pa.Table,
    config: RLRunConfig,
    output_dir: str | Path | None = None,
    resume: bool = False,
    callbacks: Sequence[Any] = (),
    policy_factory: PolicyFactory | None = None,
) -> RLResult:
    """Train on ``rl_prompt.v1`` rows; :class:`EntropyCollapse` / :class:`RLStepCountError` on a failed check.

    ``policy_factory(model, tokenizer)`` replaces the HF policy on the trainer's weights (tests drive
    the trainer with scripted episodes through it).
    """
    start = kit.open_run(RL, config, output_dir, resume)
    _drop_rollouts_after(start.out / ROLLOUTS_DIR, start.start_step)
    trainer, guard, counter, budget = build_trainer(prompts, config, start.out, callbacks, policy_factory)
    kit.write_plan(RL, trainer, start, {"max_steps": config.planned_steps}, config)
    try:
        runtime = kit.train(RL, trainer, start, config.planned_steps)
    finally:
        trainer.coa_rollouts.close()
    if guard.tripped is not None:
        raise EntropyCollapse(guard.tripped)
    planned = budget.plan.steps if budget is not None else config.planned_steps
    kit.check_steps(RL, counter.steps, trainer, planned, start)
    return _rl_result(trainer, config, start, planned, counter.steps, runtime)


def build_trainer(
    prompts: pa.Table,
    config: RLRunConfig,
    out: Path,
    callbacks: Sequence[Any] = (),
    policy_factory: PolicyFactory | None = None,
) -> tuple[Any, EntropyGuard, StepCounter, Any]:
    """The ``GRPOTrainer`` of a run with its rollout function and guards, not yet trained."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from coa.tools.config import build_toolbox
    from coa.train.budget import StepPlan, TimeBudget
    from coa.train.kit.callbacks import LogToLogger
    from coa.train.kit.tracking import tracking_args

    rows = select_prompts(prompts, config.families)
    heldout_rows: list[dict[str, Any]] = []
    if config.heldout_eval_steps is not None:
        rows, heldout_rows = split_prompts(rows, config.heldout_fraction, config.heldout_max_prompts)
        if not heldout_rows:
            log.warning(
                "heldout_eval_steps is set but the prompts hold one task: no held-out score, no alarm"
            )
    if len(rows) < config.prompts_per_step:
        raise RLError(
            f"{len(rows)} RL prompts for {config.prompts_per_step} prompts per step: a generation batch "
            "needs at least prompts_per_step distinct prompts (lower prompts_per_step or add prompts)"
        )
    cuda = torch.cuda.is_available()
    args = GRPOConfig(
        output_dir=str(out / CHECKPOINTS_DIR),
        max_steps=config.planned_steps,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        max_grad_norm=config.max_grad_norm,
        per_device_train_batch_size=config.episodes_per_generation // config.steps_per_generation,
        gradient_accumulation_steps=1,
        steps_per_generation=config.steps_per_generation,
        num_generations=config.group_size,
        num_iterations=1,
        max_completion_length=config.max_total_tokens,
        temperature=config.temperature,
        loss_type=config.loss_type,
        epsilon=config.epsilon_low,
        epsilon_high=config.epsilon_high,
        beta=config.beta,
        scale_rewards=config.scale_rewards,
        mask_truncated_completions=False,  # ours: only limit-cut episodes are masked (rollouts.train_mask)
        reward_weights=[getattr(config.rewards, t) for t in TERMS],
        activation_checkpointing=False,  # on, generate() inside the rollout gives garbage (pitfall 1)
        use_cpu=not cuda,
        bf16=bool(cuda and torch.cuda.is_bf16_supported()),
        seed=config.seed,
        data_seed=config.seed,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        logging_steps=config.logging_steps,
        **tracking_args(RL, config, out),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(config.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(config.base_model, dtype=torch.float32)
    toolbox = build_toolbox(config.tools, config.observation_root)
    judge, audit = open_judge(config, out)
    source = RolloutSource(rows, config, toolbox, judge)
    rollouts = Rollouts(source, _RolloutWriter(out / ROLLOUTS_DIR), config, out, policy_factory)
    counter, guard = (
        StepCounter(),
        EntropyGuard(config.entropy_floor, config.entropy_grace_steps, config.entropy_window),
    )
    trainer_class: Any = GRPOTrainer
    if config.is_correction == "tis":
        from coa.rl.tis import corrected_trainer

        trainer_class = corrected_trainer(GRPOTrainer)
    trainer = trainer_class(
        model=model,
        reward_funcs=[_term_reward(t) for t in TERMS],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": r["prompt_id"]} for r in rows]),
        processing_class=tokenizer,
        rollout_func=rollouts,
        callbacks=[counter, guard, LogToLogger(RL.logger, "rl step", CURVE_KEYS, digits=4), *callbacks],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.coa_tis_cap = config.tis_cap if config.is_correction == "tis" else None
    trainer.coa_rollouts = rollouts
    trainer.coa_judge_audit = audit  # type: ignore[attr-defined]
    trainer.coa_heldout = None  # type: ignore[attr-defined]
    if heldout_rows:
        heldout = HeldoutEval(
            RolloutSource(heldout_rows, config, toolbox, judge, greedy=True),
            config,
            lambda m, tok: _policy(m, tok, config, policy_factory),
            out,
        )
        heldout.trainer = trainer
        trainer.add_callback(heldout)
        trainer.coa_heldout = heldout  # type: ignore[attr-defined]
    budget = None
    if config.time_budget_s is not None:
        # re-planned once per generation batch: its steps alternate a long one (generation) and short
        # ones, so the speed of one whole batch is the unit (measured: per-step re-plans swung 33 -> 11)
        budget = TimeBudget(
            config.time_budget_s,
            StepPlan(config.planned_steps),
            cap=config.planned_steps,
            replan_every=config.steps_per_generation,
        )
        trainer.add_callback(budget)
        deadline = Deadline(config.time_budget_s)
        deadline.trainer = trainer
        trainer.add_callback(deadline)
    return trainer, guard, counter, budget


def open_judge(config: RLRunConfig, out: Path) -> tuple[Any, dict[str, Any] | None]:
    """The web-answer judge and its audit (written to ``judge_audit.json``); (None, None) without one."""
    if config.judge is None:
        return None, None
    from coa.rl.judge import checked_judge
    from coa.scoring.judge import LLMJudge

    assert config.judge_audit_set is not None
    judge = LLMJudge(config.judge)
    audit = checked_judge(judge, config.judge_audit_set, config.judge_min_agreement).model_dump(mode="json")
    log.info("judge audit: %.0f%% agreement on %d labelled answers", 100 * audit["agreement"], audit["n"])
    out.mkdir(parents=True, exist_ok=True)
    (out / JUDGE_AUDIT_FILE).write_text(json.dumps(audit, indent=2))
    return judge, audit


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
        writer: _RolloutWriter,
        config: RLRunConfig,
        out: Path,
        policy_factory: PolicyFactory | None,
    ) -> None:
        self.source, self.writer, self.config = source, writer, config
        self.policy_factory = policy_factory
        self.sync: Any = None
        self.endpoint: Any = None
        self.producer: Any = None
        self.stats: dict[str, float] = {"hook_s": 0.0, "batches": 0.0, "stale_dropped": 0.0}
        self.stats |= {"groups_trained": 0.0, "staleness_max": 0.0, "staleness_sum": 0.0}
        if config.rollout.backend == "server":
            from coa.rl.server import WeightSync, server_endpoint

            self.endpoint = server_endpoint(config)
            folder = Path(config.rollout.sync_dir) if config.rollout.sync_dir else out / "weight_sync"
            self.sync = WeightSync(self.endpoint, folder, config.rollout.pause_mode)
            self.sync.check()

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        start = time.perf_counter()
        step = int(trainer.state.global_step)
        deadline = getattr(trainer, "coa_deadline", None)
        model = trainer.accelerator.unwrap_model(trainer.model)
        if self.sync is not None:
            if trainer.accelerator.num_processes > 1:
                raise RLError(
                    "rl.rollout.backend: server runs single-process (one trainer pushes the weights)"
                )
            if self.sync.version != step:
                self.sync.push(model, step)
        if self.config.mode == "async":
            if self.producer is None:
                from coa.rl.producer import GroupProducer

                self.producer = GroupProducer(self.source, self._server_policy(trainer), step)
                self.producer.start()
            batch = self.producer.take(step, deadline)
        else:
            batch = self._sync_batch(prompts, trainer, model, step, deadline)
        if trainer.is_world_process_zero():
            self.writer.write(step, batch.rows)
        for key, value in batch.stats.items():
            trainer._metrics["train"][key].append(value)
        out = self._trl_batch(batch)
        elapsed = time.perf_counter() - start
        trainer._metrics["train"]["rollout/hook_s"].append(elapsed)
        self._count(batch, step, elapsed)
        return out

    def _sync_batch(self, prompts: list[Any], trainer: Any, model: Any, step: int, deadline: Any) -> Any:
        if self.sync is not None and self.policy_factory is None:
            return self.source.batch([str(p) for p in prompts], self._server_policy(trainer), step, deadline)
        policy = _policy(model, trainer.processing_class, self.config, self.policy_factory, version=step)
        was_training = model.training
        model.eval()
        try:
            return self.source.batch([str(p) for p in prompts], policy, step, deadline)
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
        return EndpointPolicy(self.endpoint, codec, max_connections=self.endpoint.max_concurrency)

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

    def summary(self, runtime: float) -> dict[str, float]:
        """What RL's result reports about the rollouts of this call."""
        s = self.stats
        groups = max(1.0, s["groups_trained"])
        return {
            "trainer_idle_s": round(s["hook_s"], 3),
            "trainer_idle_share": round(s["hook_s"] / runtime, 4) if runtime > 0 else 0.0,
            "staleness_mean": round(s["staleness_sum"] / groups, 4),
            "staleness_max": s["staleness_max"],
            "stale_dropped_groups": s["stale_dropped"],
            "stale_dropped_share": round(s["stale_dropped"] / (s["stale_dropped"] + groups), 4),
            "groups_trained": s["groups_trained"],
            "weight_syncs": float(self.sync.pushes) if self.sync is not None else 0.0,
            "weight_sync_s": round(self.sync.seconds, 3) if self.sync is not None else 0.0,
        }


def _policy(
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


def _term_reward(term: str) -> Any:
    """A TRL reward function returning the precomputed ``term`` of each completion."""

    def reward(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
        return [float(v) for v in kwargs[f"reward_{term}"]]

    reward.__name__ = term
    return reward


class _RolloutWriter:
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


def _drop_rollouts_after(folder: Path, step: int) -> None:
    """Remove the rollout chunks generated at or after ``step`` (a resumed run makes them again)."""
    for chunk in folder.glob("step-*.parquet") if folder.is_dir() else []:
        if int(chunk.stem.split("-")[1]) >= step:
            chunk.unlink()


def _rl_result(
    trainer: Any, config: RLRunConfig, start: kit.RunStart, planned: int, steps: int, runtime: float
) -> RLResult:
    """The kit's end of a run with RL's result (the rollout chunks joined) and curves."""
    import pyarrow.parquet as pq

    out = start.out

    def measure(model_dir: Path) -> RLResult:
        table = read_rollouts(out / ROLLOUTS_DIR)
        pq.write_table(table, out / ROLLOUTS_FILE)
        heldout: HeldoutEval | None = getattr(trainer, "coa_heldout", None)
        return RLResult(
            model_dir=str(model_dir),
            output_dir=str(out),
            steps_planned=planned,
            steps_run=steps,
            start_step=start.start_step,
            global_step=int(trainer.state.global_step),
            rollouts=table.num_rows,
            rollouts_file=str(out / ROLLOUTS_FILE),
            curves=curves(trainer.state.log_history),
            train_runtime_s=round(runtime, 3),
            device=str(trainer.args.device),
            time_budget_s=config.time_budget_s,
            curves_png=str(out / CURVES_PNG),
            judge_audit=getattr(trainer, "coa_judge_audit", None),
            heldout_prompts=len(heldout.source.order) if heldout is not None else 0,
            heldout=heldout.points if heldout is not None else [],
            alarm=heldout.alarm if heldout is not None else None,
            rollout_backend=config.rollout.backend,
            mode=config.mode,
            rollout_stats=trainer.coa_rollouts.summary(runtime),
        )

    def plot(result: RLResult) -> None:
        title = f"GRPO/DAPO: {result.global_step} steps, {result.rollouts} rollouts"
        plot_curves(result.curves, Path(result.curves_png), title, heldout=result.heldout, alarm=result.alarm)

    return kit.finish(RL, trainer, start, measure, plot)


def _run(config: RLRunConfig, output_dir: str | None, resume: bool) -> RLResult:
    from coa import io

    assert config.prompts is not None
    return run_rl(io.read_parquet_file(config.prompts), config, output_dir, resume=resume)


def _summary(result: RLResult) -> dict[str, Any]:
    return result.model_dump(mode="json", exclude={"curves"})


def _unsound(result: RLResult) -> str | None:
    bad = [p["step"] for p in result.curves if not math.isfinite(p.get("reward", 0.0))]
    return f"non-finite reward at steps {bad}" if bad else None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coa.rl.grpo --config X.yaml [--data PROMPTS] [--output-dir DIR] [--resume] [k=v ...]``."""
    return entry.main(
        RL,
        argv,
        config_model=RLRunConfig,
        run=_run,
        description="GRPO with DAPO's defaults on multi-turn CoA tool rollouts (TRL GRPOTrainer).",
        summary=_summary,
        unsound=_unsound,
    )


if __name__ == "__main__":
    sys.exit(main())
