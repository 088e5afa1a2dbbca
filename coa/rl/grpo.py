"""GRPO with DAPO's defaults on multi-turn CoA tool rollouts: TRL's ``GRPOTrainer`` + our rollouts,
the RL recipe of the trainer kit (:mod:`coa.kit`), beside SFT's (:mod:`coa.train.sft`).

``run_rl(prompts, config, output_dir, resume)`` trains ``config.base_model`` (an SFT model) on an
``rl_prompt.v1`` table and returns :class:`RLResult`. ``python -m coa.rl.grpo --config X.yaml``
runs the same from a file, so a GPU worker runs it under ``accelerate launch``.

**Rollouts.** TRL's ``rollout_func`` hook (:mod:`coa.rl.rollout_hook`) hands us the prompt ids of
a generation batch (each repeated ``group_size`` times); :class:`~coa.rl.rollouts.RolloutSource`
runs the episodes through the rollout engine, scores them, applies dynamic sampling and returns
the kept groups. Where the episodes are generated is ``rl.rollout.backend``: ``hf`` (HF ``generate``
on the trainer's own weights, eval mode, no gradient checkpointing: rl-feasibility.md pitfall 1),
``hf_batched`` (continuous batching in process on the same weights) or ``server`` (a completions server
speaking vLLM's token-id protocol, ``python -m coa.serve``; the trainer's weights are pushed to it before
each generation batch, :mod:`coa.rl.server`, versioned by the global step). With ``rl.mode:
async`` (server only) a producer thread keeps generating groups while the trainer trains, and each
batch takes finished groups within ``max_staleness`` versions (:mod:`coa.rl.producer`; its
queue and prompt cursor are saved with each checkpoint and restored by a resumed run).
``is_correction: tis`` weights each trained token by the truncated ratio of trainer to behaviour
probability (:mod:`coa.rl.tis`).
TRL trains on the ``prompt_ids`` / ``completion_ids`` we return, exactly the sampled ids;
``env_mask`` (popped by TRL as its tool mask) is 0 on every environment id, so
observations carry no gradient and do not count in the token-mean. Text is never re-tokenized.
The reward functions TRL calls only hand back the terms computed with the rollouts (one function
per term, so each is logged as ``rewards/<term>/mean``).

**LoRA** (``rl.lora``): TRL wraps the model with the adapters (peft); the ``server`` backend pushes
the adapter alone, under a new name per version (:mod:`coa.rl.server`), ``hf`` generates with the
peft model. ``model/`` is then the base with the adapter merged (what evaluation and the next
stages load), ``adapter/`` the adapter alone.

**Several ranks** (``torchrun`` / ``accelerate launch`` under DDP, FSDP2 or ZeRO-3): each rank trains
``prompts_per_step / N`` whole groups, generated on the whole model; rank 0 writes every rank's
rows and decides the held-out score and alarm for all (:mod:`coa.rl.ranks`). FSDP2 on CPU ranks,
where accelerate's FSDP does not take, is applied here (:mod:`coa.kit.fsdp`; such a run does
not resume).

**Guards.** The entropy TRL logs each step is checked against ``entropy_floor``: a collapse stops
the run with :class:`EntropyCollapse` (a failed check). A run that ends with another number of
optimizer steps than its plan raises :class:`RLStepCountError` and writes no model.

**Held-out score and the reward-hacking alarm**: with ``heldout_eval_steps`` a slice of the
prompts is kept out of training and scored by greedy rollouts on a schedule
(:mod:`coa.rl.heldout`); a rising training reward with a falling held-out score is the alarm
(:mod:`coa.rl.alarm`), logged as a WARNING and reported as ``RLResult.alarm``.

**Checkpoints and resume** are the kit's, as in SFT: ``checkpoints/checkpoint-N`` every
``save_steps``; a resumed run continues from the last one (the config must match, ``rl_plan.json``),
and the rollout rows of steps after that checkpoint are discarded (they are generated again, the
same ones: the resume is exact, :mod:`coa.rl.resume`). Each
generation batch's rows go to ``rollouts/step-NNNNNN.parquet`` as it is made; the finished run joins them into
``rollouts.parquet`` (``rollout.v1``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from coa.kit import entry, fsdp
from coa.kit import run as kit
from coa.kit.callbacks import StepCounter
from coa.kit.run import CHECKPOINTS_DIR
from coa.resources import device_name
from coa.rl.callbacks import Deadline, EntropyGuard
from coa.rl.config import RL, EntropyCollapse, RLError, RLResult, RLRunConfig
from coa.rl.curves import CURVE_KEYS, curves, plot_curves
from coa.rl.heldout import HeldoutEval, split_prompts
from coa.rl.ranks import launched_world_size, rank_batch
from coa.rl.rewards import TERMS
from coa.rl.rollout_hook import (
    ROLLOUTS_DIR,
    PolicyFactory,
    Rollouts,
    RolloutWriter,
    drop_rollouts_after,
    policy_on_weights,
    read_rollouts,
)
from coa.rl.rollouts import RolloutSource

log = logging.getLogger(RL.logger)

MODEL_DIR = kit.MODEL_DIR
ADAPTER_DIR = "adapter"
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
    drop_rollouts_after(start.out / ROLLOUTS_DIR, start.start_step)
    if start.last is not None:
        from coa.rl.resume import check_sampling_state

        check_sampling_state(start.last, launched_world_size())
    trainer, guard, counter, budget = build_trainer(prompts, config, start.out, callbacks, policy_factory)
    if start.last is not None and config.mode == "async":
        from coa.rl.resume import read_producer_state

        trainer.coa_rollouts.restored = read_producer_state(start.last)
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


def rollout_toolbox(config: RLRunConfig) -> Any:
    """The tools the policy calls in its rollouts: ``rl.tools``, the local search built from the run's
    encyclopedia file (the step's copy of its ``encyclopedia`` input: the synthetic step's table, the
    documents the tasks were drawn from), recording into the store's observations."""
    from coa.tools.build import build_toolbox
    from coa.tools.collection import read_collection_file

    collection = read_collection_file(config.encyclopedia)
    return build_toolbox(config.tools, config.observation_root, collection=collection, fix="rl.tools")


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

    from coa.kit.budget import StepPlan, TimeBudget
    from coa.kit.callbacks import LogToLogger
    from coa.kit.tracking import tracking_args
    from coa.rl import resume

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
    if fsdp.cpu_fsdp2_requested():
        fsdp.check_supported(RL.name, RLError, config.lora is not None)
    cuda = torch.cuda.is_available()
    args = GRPOConfig(
        output_dir=str(out / CHECKPOINTS_DIR),
        max_steps=config.planned_steps,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        max_grad_norm=config.max_grad_norm,
        # N ranks x this = the plan's batch: each rank trains prompts_per_step / N whole groups
        per_device_train_batch_size=rank_batch(config, launched_world_size()),
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
        save_only_model=fsdp.cpu_fsdp2_requested(),  # FSDP2 on CPU: no optimizer checkpoint (kit.fsdp)
        logging_steps=config.logging_steps,
        **tracking_args(RL, config, out),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(config.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(config.base_model, dtype=torch.float32)
    toolbox = rollout_toolbox(config)
    judge, audit = open_judge(config, out)
    source = RolloutSource(rows, config, toolbox, judge)
    rollouts = Rollouts(source, RolloutWriter(out / ROLLOUTS_DIR), config, out, policy_factory)
    counter, guard = (
        StepCounter(),
        EntropyGuard(config.entropy_floor, config.entropy_grace_steps, config.entropy_window),
    )
    trainer_class: Any = GRPOTrainer
    if config.is_correction == "tis":
        from coa.rl.tis import corrected_trainer

        trainer_class = corrected_trainer(GRPOTrainer)
    peft_config = None
    if config.lora is not None:
        from coa.kit.lora import peft_config_of

        peft_config = peft_config_of(config.lora, RL.error)
    trainer = trainer_class(
        model=model,
        reward_funcs=[_term_reward(t) for t in TERMS],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": r["prompt_id"]} for r in rows]),
        processing_class=tokenizer,
        peft_config=peft_config,
        rollout_func=rollouts,
        callbacks=[counter, guard, LogToLogger(RL.logger, "rl step", CURVE_KEYS, digits=4), *callbacks],
    )
    trainer.remove_callback(PrinterCallback)
    if fsdp.cpu_fsdp2_requested():  # accelerate's FSDP takes on GPUs only: shard here (coa.kit.fsdp)
        fsdp.install(trainer)
    acc = trainer.accelerator
    log.info(
        "rank %d of %d (pid %d, %s)", acc.process_index, acc.num_processes, os.getpid(), acc.distributed_type
    )
    if shards := fsdp.describe_shards(trainer):
        log.info("rank %d %s", trainer.accelerator.process_index, shards)
    resume.install(trainer)  # epoch-keyed prompt order, sampling state in every checkpoint
    trainer.coa_tis_cap = config.tis_cap if config.is_correction == "tis" else None
    trainer.coa_rollouts = rollouts
    trainer.coa_judge_audit = audit  # type: ignore[attr-defined]
    trainer.coa_heldout = None  # type: ignore[attr-defined]
    if heldout_rows:
        heldout = HeldoutEval(
            RolloutSource(heldout_rows, config, toolbox, judge, greedy=True),
            config,
            lambda m, tok: policy_on_weights(m, tok, config, policy_factory),
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
            logger=RL.logger,
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
    from coa.rl.judge_audit import checked_judge
    from coa.scoring.judge import LLMJudge

    assert config.judge_audit_set is not None
    judge = LLMJudge(config.judge)
    audit = checked_judge(judge, config.judge_audit_set, config.judge_min_agreement).model_dump(mode="json")
    log.info("judge audit: %.0f%% agreement on %d labelled answers", 100 * audit["agreement"], audit["n"])
    out.mkdir(parents=True, exist_ok=True)
    (out / JUDGE_AUDIT_FILE).write_text(json.dumps(audit, indent=2))
    return judge, audit


def _term_reward(term: str) -> Any:
    """A TRL reward function returning the precomputed ``term`` of each completion."""

    def reward(prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
        return [float(v) for v in kwargs[f"reward_{term}"]]

    reward.__name__ = term
    return reward


def _rl_result(
    trainer: Any, config: RLRunConfig, start: kit.RunStart, planned: int, steps: int, runtime: float
) -> RLResult:
    """The kit's end of a run with RL's result (the rollout chunks joined) and curves."""
    import pyarrow.parquet as pq

    out = start.out
    adapter_dir = out / ADAPTER_DIR if config.lora is not None else None

    def save(trainer: Any, model_dir: Path) -> None:
        """``model/``: the full model (LoRA: the base with the adapter merged, what evaluation and the
        next stages load, as SFT's); ``adapter/``: the LoRA adapter alone (what a server loads by name)."""
        if adapter_dir is None:
            trainer.save_model(str(model_dir))
            return
        trainer.save_model(str(adapter_dir))
        if trainer.is_world_process_zero():
            save_merged(trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class, model_dir)

    def measure(model_dir: Path) -> RLResult:
        table = read_rollouts(out / ROLLOUTS_DIR)
        if trainer.is_world_process_zero():  # one writer on N ranks, never half-written (renamed in)
            tmp = out / f".{ROLLOUTS_FILE}.tmp"
            pq.write_table(table, tmp)
            tmp.replace(out / ROLLOUTS_FILE)
        heldout: HeldoutEval | None = getattr(trainer, "coa_heldout", None)
        return RLResult(
            model_dir=str(model_dir),
            adapter_dir=str(adapter_dir) if adapter_dir is not None else None,
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
            device_name=device_name(str(trainer.args.device)),
            time_budget_s=config.time_budget_s,
            curves_png=str(out / CURVES_PNG),
            judge_audit=getattr(trainer, "coa_judge_audit", None),
            heldout_prompts=len(heldout.source.order) if heldout is not None else 0,
            heldout=heldout.points if heldout is not None else [],
            alarm=heldout.alarm if heldout is not None else None,
            rollout_backend=config.rollout.backend,
            mode=config.mode,
            rollout_stats=trainer.coa_rollouts.summary(runtime, trainer),  # every rank's
        )

    def plot(result: RLResult) -> None:
        title = f"GRPO/DAPO: {result.global_step} steps, {result.rollouts} rollouts"
        plot_curves(result.curves, Path(result.curves_png), title, heldout=result.heldout, alarm=result.alarm)

    return kit.finish(RL, trainer, start, measure, plot, save)


def save_merged(peft_model: Any, tokenizer: Any, model_dir: Path) -> None:
    """The base model with the adapter merged, to ``model_dir``, at the end of a run (the trainer's
    model is merged in place, as SFT's; the result file, written after it, marks a finished run)."""
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(str(model_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(model_dir))


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
