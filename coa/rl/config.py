"""Configuration and result of an RL run (GRPO with DAPO defaults); light to import (no torch, no TRL).

:class:`RLStageConfig` is the one RL config a user sets (how to train, and where the pipeline's
stage runs), :class:`RLRunConfig` one run from a file (``python -m coa.rl.grpo``), derived from it,
:class:`RLResult` what a finished run reports (``rl_result.json``), :data:`RL` the recipe the
trainer kit (:mod:`coa.kit`) runs it as. The fields every recipe shares are declared once in
:mod:`coa.kit.config`, the episodes' limits in :mod:`coa.rollout.config`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coa.config import StrictModel
from coa.errors import CheckFailed
from coa.kit.config import RESUME_FREE_FIELDS as KIT_RESUME_FREE
from coa.kit.config import (
    LearningRate,
    LoggingSteps,
    LoraSettings,
    MaxSteps,
    SaveSteps,
    TrainLoop,
    TrainRun,
    TrainStage,
)
from coa.kit.recipe import Recipe, TrainError
from coa.llm.config import LLMConfig
from coa.rl.serving import RLRollout
from coa.rollout.config import MaxTotalTokens, MaxTurns, RolloutLimits
from coa.tools.config import ToolsConfig

RESUME_FREE_FIELDS = KIT_RESUME_FREE | {
    "prompts",
    "alarm_window",
    "alarm_reward_rise",
    "alarm_heldout_drop",
    "rollout",  # where episodes come from (a restarted server has a new address), not what is trained
}
"""Fields that may differ between a run and its resumption (they do not change the training itself)."""


class RLError(TrainError):
    """An RL run that cannot start or cannot be reported (no prompts, config changed on resume…)."""


class RLStepCountError(RLError, CheckFailed):
    """The run did not take the planned number of optimizer steps; its result is not reported."""


class EntropyCollapse(RLError, CheckFailed):
    """The policy's entropy fell below the configured floor: the run stopped instead of burning its budget."""


class RewardWeights(StrictModel):
    """Weight of each reward term in the total reward (each term is also logged on its own)."""

    correct: float = Field(
        default=1.0,
        description="The task's own check: QA exact match, math-verify, or all code tests passing (0/1).",
    )
    format: float = Field(
        default=0.1,
        ge=0,
        description="1 when the trajectory is valid under its variant's grammar. Kept small and, with "
        "scale_rewards=none, never divided by a group's tiny std (rl-feasibility.md pitfall 7).",
    )
    efficiency: float = Field(
        default=0.0,
        ge=0,
        description="Tool-call efficiency: minus this per tool call beyond `free_tool_calls`, only on "
        "correct episodes (0 = off).",
    )
    overlong: float = Field(
        default=1.0,
        ge=0,
        description="DAPO's soft overlong penalty (0 to -1 over the last `overlong_buffer` tokens of the "
        "budget); 0 = off.",
    )


class RLLora(LoraSettings):
    """LoRA adapters trained by GRPO instead of all weights (``rl.lora``; needs ``peft``).

    The final ``model/`` is the base with the adapter merged (what evaluation and the next stages
    load), the adapter itself is kept in ``adapter/``.
    """

    dropout: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Dropout on the adapter input. 0 by default in RL: with dropout the trainer's "
        "probability of a sampled token is not the one the (dropout-free) sampler had, which the "
        "importance ratio and the clip read as off-policy drift.",
    )


class RLStageConfig(TrainLoop, RolloutLimits, TrainStage):
    """The RL stage, the one RL config a user sets (the ``rl`` section of a profile): GRPO on
    multi-turn tool rollouts with DAPO's defaults, and where it runs
    (:class:`~coa.kit.config.TrainStage`). A run's form (:class:`RLRunConfig`) is derived from it.

    The loop's fields are the trainer kit's (:class:`~coa.kit.config.TrainLoop`) and the
    episodes' limits the rollout engine's (:class:`~coa.rollout.config.RolloutLimits`, as in
    evaluation), with RL's defaults. One generation batch = ``prompts_per_step`` groups of
    ``group_size`` episodes; it feeds ``steps_per_generation`` optimizer steps (so the clip ratio
    differs from 1 and clip-higher acts). ``max_steps`` is the plan; with ``time_budget_s`` the plan
    is re-fitted while training so the run ends within the budget (never more than ``max_steps``).
    """

    max_steps: MaxSteps = 20
    learning_rate: LearningRate = 1e-4
    save_steps: SaveSteps = 10
    logging_steps: LoggingSteps = 1
    max_turns: MaxTurns = 6
    max_total_tokens: MaxTotalTokens = 768

    prompts_per_step: int = Field(
        default=4, ge=1, description="Groups (distinct prompts) per generation batch."
    )
    group_size: int = Field(default=8, ge=2, description="Episodes per prompt (GRPO group, DAPO n).")
    steps_per_generation: int = Field(
        default=2,
        ge=1,
        description="Optimizer steps each generation batch feeds (>1 so the clip ratio leaves 1; DAPO).",
    )
    epsilon_low: float = Field(default=0.2, gt=0, description="Lower clip range (1 - eps_low).")
    epsilon_high: float = Field(
        default=0.28, gt=0, description="Upper clip range, clip-higher (1 + eps_high)."
    )
    beta: float = Field(
        default=0.0, ge=0, description="KL coefficient to the starting model; 0 = no KL (DAPO)."
    )
    loss_type: Literal["dapo", "grpo", "dr_grpo", "bnpo"] = Field(
        default="dapo", description="TRL loss aggregation; dapo = token-mean over the whole batch."
    )
    scale_rewards: Literal["none", "group", "batch"] = Field(
        default="none",
        description="Advantage scaling: none = reward minus group mean (a small format bonus stays small); "
        "group divides by each group's std (a 0.1 bonus can become a full +-1 advantage).",
    )
    dynamic_sampling: bool = Field(
        default=True,
        description="Drop groups whose total rewards are all equal; refill the batch from further prompts.",
    )
    max_refill_rounds: int = Field(
        default=2,
        ge=0,
        description="Further rounds of prompts dynamic sampling may run per batch; a batch still short after "
        "them is filled with dropped groups (zero advantage), and the shortfall is logged.",
    )
    mask_truncated: bool = Field(
        default=True,
        description="Episodes cut by a limit (tokens, turns, a generation without a closing tag) carry no "
        "gradient (DAPO overlong filtering); format errors and answers are trained.",
    )
    overlong_buffer: int = Field(
        default=64, ge=1, description="Tokens before max_total_tokens over which the overlong penalty ramps."
    )
    free_tool_calls: int = Field(
        default=1, ge=0, description="Tool calls the efficiency term does not charge."
    )
    rewards: RewardWeights = Field(default_factory=RewardWeights, description="Reward term weights.")
    entropy_floor: float | None = Field(
        default=0.01,
        ge=0,
        description="Stop with EntropyCollapse when the mean token entropy of the last `entropy_window` "
        "logged steps falls below this (after `entropy_grace_steps`); null = no guard.",
    )
    entropy_grace_steps: int = Field(default=2, ge=0, description="Steps before the entropy guard acts.")
    entropy_window: int = Field(
        default=5,
        ge=1,
        description="Logged steps the entropy guard averages: one batch's entropy is noisy (a confident "
        "model's swung 0.005-0.058 nats within 30 steps).",
    )
    heldout_eval_steps: int | None = Field(
        default=None,
        ge=1,
        description="Score the held-out prompts (one greedy rollout each, same engine and rewards) before "
        "training and every this many optimizer steps, for the reward-hacking alarm (coa/rl/alarm.py). "
        "null = off, and no prompt is held out.",
    )
    heldout_fraction: float = Field(
        default=0.1,
        gt=0,
        le=0.5,
        description="With heldout_eval_steps: share of the RL prompts (whole tasks, picked by a hash of the "
        "task id) kept out of training and scored instead.",
    )
    heldout_max_prompts: int = Field(
        default=32, ge=1, description="At most this many held-out prompts (each eval rolls out every one)."
    )
    alarm_window: int = Field(
        default=3,
        ge=2,
        description="Held-out evaluations the reward-hacking rule looks back over (coa/rl/alarm.py).",
    )
    alarm_reward_rise: float = Field(
        default=0.05,
        ge=0,
        description="Least rise of the training reward (least-squares over the window) for the alarm.",
    )
    alarm_heldout_drop: float = Field(
        default=0.05,
        ge=0,
        description="Least fall of the held-out score (share correct, least-squares over the window) for "
        "the alarm.",
    )
    rollout: RLRollout = Field(
        default_factory=RLRollout, description="Where the episodes are generated (backend, server)."
    )
    mode: Literal["sync", "async"] = Field(
        default="sync",
        description="sync = each generation batch is generated on the current weights, then trained "
        "on; async = a producer thread keeps generating groups from the server while the trainer "
        "trains (backend=server only), and each batch takes the oldest finished groups within "
        "max_staleness. On resume, queued async groups are not persisted: they are regenerated "
        "from the checkpoint's weights (their rows after the checkpoint are discarded, as in sync).",
    )
    max_staleness: int = Field(
        default=2,
        ge=0,
        description="async: a group whose oldest generation is more than this many policy versions "
        "(generation batches) behind the trainer is dropped, not trained (counted as async/stale_dropped).",
    )
    async_groups_in_flight: int | None = Field(
        default=None,
        ge=1,
        description="async: groups generated or queued at once at most; null = prompts_per_step * "
        "(max_staleness + 1).",
    )
    lora: RLLora | None = Field(
        default=None,
        description="Train LoRA adapters (r, alpha, target_modules, dropout) instead of all weights; null "
        "= full weights. With backend=server the adapter is pushed by name (rl.rollout.weight_sync).",
    )
    is_correction: Literal["none", "tis"] = Field(
        default="none",
        description="Importance correction for behaviour/trainer mismatch: tis = truncated importance "
        "sampling, each trained token's loss weighted by min(p_trainer / p_behaviour, tis_cap), the "
        "trainer's probability at the start of the batch and the recorded behaviour logprob.",
    )
    tis_cap: float = Field(default=2.0, ge=1, description="Truncation cap of the TIS weight.")
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature of the rollouts.")
    generation_batch: int = Field(
        default=64, ge=1, description="Most generations batched into one generate call."
    )
    families: tuple[str, ...] | Literal["auto"] | None = Field(
        default=None,
        description="Train on the prompts of these families only; null = all; auto = the family the SFT "
        "model's held-out evaluation shows weakest among those it solves sometimes (coa.rl.family).",
    )
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="The tools the policy calls.")
    judge: LLMConfig | None = Field(
        default=None,
        description="LLM judge of web answers (its `judge` endpoint; verdicts cached in its response cache); "
        "null = exact match, then token F1.",
    )
    judge_audit_set: str | None = Field(
        default=None,
        description="Labelled audit set (JSON lines: id, question, prediction, gold_answers, label) the "
        "judge is scored on before the run; required with a judge.",
    )
    judge_min_agreement: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="Agreement with the audit set below which the run does not start.",
    )
    name: str = Field(default="rl", description="Artifact name of the RL-trained model.")

    @model_validator(mode="after")
    def _batch_divides(self) -> RLStageConfig:
        if self.max_steps is None:
            raise ValueError("rl needs max_steps (the plan, and the cap of a time budget)")
        if self.max_context_tokens is not None:
            raise ValueError(
                "max_context_tokens must be null in RL: the trainer scores every sampled token against the "
                "whole context, which a cut context would not have shown the policy (off-policy tokens)"
            )
        episodes = self.prompts_per_step * self.group_size
        if episodes % self.steps_per_generation:
            raise ValueError(
                f"prompts_per_step * group_size ({episodes}) must be a multiple of steps_per_generation "
                f"({self.steps_per_generation})"
            )
        if self.judge is not None and self.judge_audit_set is None:
            raise ValueError("a judge needs a judge_audit_set: it is audited before it rewards a run")
        if self.save_steps % self.steps_per_generation:
            raise ValueError(
                f"save_steps ({self.save_steps}) must be a multiple of steps_per_generation "
                f"({self.steps_per_generation}): a checkpoint falls between generation batches"
            )
        if self.epsilon_high < self.epsilon_low:
            raise ValueError("epsilon_high must be >= epsilon_low (clip-higher)")
        if self.mode == "async" and self.rollout.backend != "server":
            raise ValueError(
                "rl.mode: async generates from a completions server while the trainer trains: set "
                "rl.rollout.backend: server (the in-process backends share the trainer's weights)"
            )
        self._check_lora()
        return self

    def _check_lora(self) -> None:
        sync = self.rollout.weight_sync
        if sync == "adapter" and self.lora is None:
            raise ValueError(
                "rl.rollout.weight_sync: adapter pushes the LoRA adapter of rl.lora: set rl.lora"
            )
        if self.lora is None:
            return
        if sync == "full" and self.rollout.backend == "server":
            raise ValueError(
                "rl.lora with rl.rollout.weight_sync: full would push merged weights, which is not built: "
                "use weight_sync: adapter (or auto) with a vLLM or coa.serve server"
            )
        if self.rollout.backend == "hf_batched":
            raise ValueError(
                "rl.lora with rl.rollout.backend: hf_batched is not supported (its batcher would generate "
                "with the base model, not the adapter): use backend hf or server"
            )

    @property
    def adapter_sync(self) -> bool:
        """backend=server pushes the LoRA adapter (by name), not full weights."""
        return (
            self.rollout.backend == "server" and self.lora is not None and self.rollout.weight_sync != "full"
        )

    @property
    def episodes_per_generation(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def groups_in_flight(self) -> int:
        """async: groups generated or queued at once at most."""
        return self.async_groups_in_flight or self.prompts_per_step * (self.max_staleness + 1)

    @property
    def planned_steps(self) -> int:
        """``max_steps``, which RL always has (checked on construction)."""
        assert self.max_steps is not None
        return self.max_steps


class RLRunConfig(RLStageConfig, TrainRun):
    """One RL run (``python -m coa.rl.grpo --config``): the stage's config (:class:`RLStageConfig`) plus
    the model to start from, where to write and the prompts; ``name`` and where the stage runs are
    carried unchanged and never restart a resumed run."""

    prompts: str | None = Field(
        default=None, description="For `python -m coa.rl.grpo`: a Parquet file of rl_prompt.v1 rows."
    )
    observation_root: str | None = Field(
        default=None, description="Storage root whose observation store the tools record into (null = none)."
    )
    encyclopedia: str | None = Field(
        default=None,
        description="A Parquet file of document.v1 rows the local search serves (the step's copy of its "
        "encyclopedia input); null = none (a local search is then refused).",
    )


class RLResult(BaseModel):
    """What a finished RL run did; written to ``rl_result.json``."""

    model_config = ConfigDict(frozen=True)

    model_dir: str = Field(
        description="The final model and tokenizer (for LoRA: the base with the adapter merged)."
    )
    adapter_dir: str | None = Field(
        default=None, description="The LoRA adapter (rl.lora); None for full weights."
    )
    output_dir: str
    steps_planned: int = Field(description="Optimizer steps of the plan in force at the end.")
    steps_run: int = Field(description="Optimizer steps taken in this call (the plan minus resumed steps).")
    start_step: int = Field(description="Global step resumed from (0 for a fresh run).")
    global_step: int
    rollouts: int = Field(description="Episodes generated over the whole run (dropped groups included).")
    rollouts_file: str = Field(description="Parquet file of rollout.v1 rows, every episode of the run.")
    curves: list[dict[str, float]] = Field(
        description="Per logged step: reward, each reward term, entropy, zero-variance share, clip ratios."
    )
    train_runtime_s: float = Field(description="Wall time of the training loop in this call.")
    device: str
    device_name: str | None = Field(
        default=None,
        description="The GPU's name, or the CPU's model and the threads torch trained with (results "
        "written before 2026-11-28 have none).",
    )
    time_budget_s: float | None = None
    curves_png: str = Field(description="Reward / entropy / zero-variance curves.")
    judge_audit: dict[str, object] | None = Field(
        default=None, description="The judge's audit (agreement with the labelled set); None without a judge."
    )
    heldout_prompts: int = Field(default=0, description="Prompts held out of training and scored (0 = off).")
    heldout: list[dict[str, float]] = Field(
        default_factory=list, description="Per held-out scoring: step, correct, format_valid, reward, tokens."
    )
    alarm: str | None = Field(
        default=None, description="The reward-hacking alarm's message (its first firing); None = never."
    )
    rollout_backend: str = Field(default="hf", description="Where the episodes were generated (rl.rollout).")
    mode: str = Field(default="sync", description="sync or async (rl.mode).")
    rollout_stats: dict[str, float] = Field(
        default_factory=dict,
        description="Over this call and every rank (counts added up): trainer_idle_s / _share (time in the "
        "rollout hook, the mean rank's: generating in sync mode, waiting for groups and pushing weights in "
        "async), staleness_mean / _max of the trained groups (policy versions), stale_dropped_groups / "
        "_share, groups_trained, groups_generated, episodes (rows written), truncated_share, weight_syncs, "
        "weight_sync_s and weight_version_mismatches (backend=server).",
    )


RL = Recipe(
    name="rl",
    title="RL",
    module="coa.rl.grpo",
    plan_file="rl_plan.json",
    result_file="rl_result.json",
    data_field="prompts",
    data_file="prompts.parquet",
    resume_free=RESUME_FREE_FIELDS,
    error=RLError,
    step_count_error=RLStepCountError,
    check_errors=(EntropyCollapse,),
    logger="coa.rl",
)
"""GRPO with DAPO's defaults as a recipe of the trainer kit."""
