"""GRPO with DAPO's defaults on multi-turn CoA tool rollouts: TRL's ``GRPOTrainer`` + our rollouts.

``run_rl(prompts, config, output_dir, resume)`` trains ``config.base_model`` (an SFT model) on an
``rl_prompt.v1`` table and returns :class:`RLResult`. ``python -m coa.rl.grpo --config X.yaml``
runs the same from a file, so a GPU worker runs it under ``accelerate launch``.

**Rollouts.** TRL's ``rollout_func`` hook hands us the prompt ids of a generation batch (each
repeated ``group_size`` times); :class:`~coa.rl.rollouts.RolloutSource` runs the episodes through
the rollout engine with an HF policy on the trainer's own weights (eval mode, no gradient
checkpointing: rl-feasibility.md pitfall 1), scores them, applies dynamic sampling and returns
the kept groups. TRL trains on the ``prompt_ids`` / ``completion_ids`` we return, exactly the
sampled ids; ``env_mask`` (popped by TRL as its tool mask) is 0 on every environment id, so
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

**Checkpoints and resume** as in SFT: ``checkpoints/checkpoint-N`` every ``save_steps``; a resumed
run continues from the last one (the config must match, ``rl_plan.json``), and the rollout rows of
steps after that checkpoint are discarded (they are generated again). Each generation batch's rows
go to ``rollouts/step-NNNNNN.parquet`` as it is made; the finished run joins them into
``rollouts.parquet`` (``rollout.v1``).
"""

from __future__ import annotations

import argparse
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

from coa.rl.callbacks import Deadline, EntropyGuard, LogToLogger, StepCounter
from coa.rl.config import (
    RESUME_FREE_FIELDS,
    EntropyCollapse,
    RLError,
    RLResult,
    RLRunConfig,
    RLStepCountError,
)
from coa.rl.curves import curves, plot_curves
from coa.rl.heldout import HeldoutEval, split_prompts
from coa.rl.rewards import TERMS
from coa.rl.rollouts import RolloutSource, train_mask
from coa.rollout import Policy
from coa.train.sft import checkpoint_step, last_checkpoint

PolicyFactory = Callable[[Any, Any], Policy]
log = logging.getLogger("coa.rl")

CHECKPOINTS_DIR = "checkpoints"
MODEL_DIR = "model"
ROLLOUTS_DIR = "rollouts"
ROLLOUTS_FILE = "rollouts.parquet"
PLAN_FILE = "rl_plan.json"
RESULT_FILE = "rl_result.json"
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
    chosen = output_dir if output_dir is not None else config.output_dir
    if chosen is None:
        raise RLError("no output folder: pass output_dir or set output_dir in the config")
    out = Path(chosen)
    last = last_checkpoint(out / CHECKPOINTS_DIR)
    if last is not None and not resume:
        raise RLError(
            f"{out / CHECKPOINTS_DIR} already holds checkpoints (last: {last.name}); "
            "resume, or use a new folder"
        )
    plan_path = out / PLAN_FILE
    if last is not None:
        if not plan_path.is_file():
            raise RLError(f"{plan_path} is missing: cannot tell what plan {last} belongs to")
        _check_resumable(json.loads(plan_path.read_text())["config"], config)
    start_step = checkpoint_step(last) if last is not None else 0
    _drop_rollouts_after(out / ROLLOUTS_DIR, start_step)

    trainer, guard, counter, budget = build_trainer(prompts, config, out, callbacks, policy_factory)
    if trainer.is_world_process_zero():
        out.mkdir(parents=True, exist_ok=True)
        plan_path.write_text(
            json.dumps({"max_steps": config.max_steps, "config": config.model_dump(mode="json")}, indent=2)
        )
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(last) if last is not None else None)
    runtime = time.perf_counter() - t0
    state = trainer.state
    if guard.tripped is not None:
        raise EntropyCollapse(guard.tripped)
    planned = budget.plan.steps if budget is not None else config.max_steps
    if counter.steps != planned - start_step or state.global_step != planned:
        raise RLStepCountError(
            f"RL took {counter.steps} optimizer steps in this run but the plan was {planned - start_step} "
            f"(global step {state.global_step} of {planned}, resumed from {start_step}); "
            "not reporting success. "
            f"The checkpoints in {out / CHECKPOINTS_DIR} are kept; no final model was written."
        )
    return _finish(trainer, config, out, planned, start_step, counter.steps, runtime)


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
        max_steps=config.max_steps,
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
        report_to="none",
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
    writer = _RolloutWriter(out / ROLLOUTS_DIR)
    counter, guard = (
        StepCounter(),
        EntropyGuard(config.entropy_floor, config.entropy_grace_steps, config.entropy_window),
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[_term_reward(t) for t in TERMS],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": r["prompt_id"]} for r in rows]),
        processing_class=tokenizer,
        rollout_func=lambda batch, tr: _rollouts(batch, tr, source, writer, config, policy_factory),
        callbacks=[counter, guard, LogToLogger(), *callbacks],
    )
    trainer.remove_callback(PrinterCallback)
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
            StepPlan(config.max_steps),
            cap=config.max_steps,
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


def _rollouts(
    prompts: list[Any],
    trainer: Any,
    source: RolloutSource,
    writer: _RolloutWriter,
    config: RLRunConfig,
    policy_factory: PolicyFactory | None,
) -> dict[str, Any]:
    """TRL's rollout hook: one completion per received prompt, in groups of ``group_size``."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    policy = _policy(model, trainer.processing_class, config, policy_factory)
    was_training = model.training
    model.eval()
    try:
        deadline = getattr(trainer, "coa_deadline", None)
        batch = source.batch([str(p) for p in prompts], policy, int(trainer.state.global_step), deadline)
    finally:
        model.train(was_training)
    if trainer.is_world_process_zero():
        writer.write(int(trainer.state.global_step), batch.rows)
    for key, value in batch.stats.items():
        trainer._metrics["train"][key].append(value)
    out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
    for name in TERMS:
        out[f"reward_{name}"] = []
    for group in batch.groups:
        for episode, reward in zip(group.episodes, group.rewards, strict=True):
            out["prompt_ids"].append(list(episode.prompt_ids))
            out["completion_ids"].append(list(episode.completion_ids))
            out["logprobs"].append([0.0 if lp is None else float(lp) for lp in episode.logprobs])
            out["env_mask"].append(train_mask(episode, config.mask_truncated))
            for name in TERMS:
                out[f"reward_{name}"].append(reward.term(name))
    return out


def _policy(model: Any, tokenizer: Any, config: RLRunConfig, policy_factory: PolicyFactory | None) -> Policy:
    """The policy on the trainer's weights: the test's factory, else HF generate."""
    if policy_factory is not None:
        return policy_factory(model, tokenizer)
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


def _check_resumable(saved: dict[str, Any], config: RLRunConfig) -> None:
    now = config.model_dump(mode="json")
    changed = sorted(
        k for k in set(saved) | set(now) if k not in RESUME_FREE_FIELDS and saved.get(k) != now.get(k)
    )
    if changed:
        diffs = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed)
        raise RLError(f"cannot resume with a changed RL config ({diffs}); use a new output folder")


def _finish(
    trainer: Any, config: RLRunConfig, out: Path, planned: int, start_step: int, steps: int, runtime: float
) -> RLResult:
    import pyarrow.parquet as pq

    trainer.save_model(str(out / MODEL_DIR))
    table = read_rollouts(out / ROLLOUTS_DIR)
    pq.write_table(table, out / ROLLOUTS_FILE)
    points = curves(trainer.state.log_history)
    heldout: HeldoutEval | None = getattr(trainer, "coa_heldout", None)
    result = RLResult(
        model_dir=str(out / MODEL_DIR),
        output_dir=str(out),
        steps_planned=planned,
        steps_run=steps,
        start_step=start_step,
        global_step=int(trainer.state.global_step),
        rollouts=table.num_rows,
        rollouts_file=str(out / ROLLOUTS_FILE),
        curves=points,
        train_runtime_s=round(runtime, 3),
        device=str(trainer.args.device),
        time_budget_s=config.time_budget_s,
        curves_png=str(out / CURVES_PNG),
        judge_audit=getattr(trainer, "coa_judge_audit", None),
        heldout_prompts=len(heldout.source.order) if heldout is not None else 0,
        heldout=heldout.points if heldout is not None else [],
        alarm=heldout.alarm if heldout is not None else None,
    )
    if trainer.is_world_process_zero():
        plot_curves(
            points,
            out / CURVES_PNG,
            f"GRPO/DAPO: {trainer.state.global_step} steps, {table.num_rows} rollouts",
            heldout=result.heldout,
            alarm=result.alarm,
        )
        (out / RESULT_FILE).write_text(result.model_dump_json(indent=2))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coa.rl.grpo --config X.yaml [--output-dir DIR] [--resume] [k=v ...]``."""
    from coa import io
    from coa.config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog="python -m coa.rl.grpo", description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="YAML with the RLRunConfig fields")
    parser.add_argument("--output-dir", help="output folder (overrides `output_dir`)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint if any")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(ns.config, ns.overrides, model=RLRunConfig)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    if config.prompts is None:
        print(
            "no prompts: set `prompts` (a Parquet file of rl_prompt.v1 rows) in the config", file=sys.stderr
        )
        return 2
    try:
        result = run_rl(io.read_parquet_file(config.prompts), config, ns.output_dir, resume=ns.resume)
    except EntropyCollapse as e:
        print(f"check failed: {e}", file=sys.stderr)
        return 1
    except RLStepCountError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except RLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result.model_dump(mode="json", exclude={"curves"}), indent=2, sort_keys=True))
    return 0 if all(math.isfinite(p.get("reward", 0.0)) for p in result.curves) else 1


if __name__ == "__main__":
    sys.exit(main())
