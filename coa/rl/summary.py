"""The RL step's summary, typed: what :func:`coa.rl.step.step` reports and lineage stores.

The runner keeps a step's summary as JSON in ``_lineage.json`` (a reused step hands back what was
stored), so readers (the CLI, the Prefect artifacts) parse it with :meth:`RLSummary.from_dict` and
read fields, never string keys. Reading is tolerant: keys an older artifact did not store take
their defaults, keys it stored that this version no longer reads are ignored.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from coa.steps import StepSummary


class FamilyChoice(BaseModel):
    """The family ``rl.families: auto`` trained on, and why (:func:`coa.rl.family.pick_family`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    family: str = Field(description="The family chosen.")
    accuracy: dict[str, float] = Field(description="Held-out accuracy per family that decided it.")
    rule: str = Field(description="The rule that picked it, in words.")
    warning: str | None = Field(default=None, description="Set when the choice fell back.")
    excluded: dict[str, str] = Field(
        default_factory=dict, description="Families with prompts left out: family → why (tools not enabled)."
    )


class LearningSignal(BaseModel):
    """Episodes and groups of the run's rollouts that could teach accuracy
    (:func:`coa.rl.signal.learning_signal`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    episodes: int = Field(description="Episodes of the run.")
    correct_share: float = Field(description="Share of the episodes that were correct.")
    groups: int = Field(description="Generation groups (one prompt of one batch).")
    groups_with_a_correct_episode: int = Field(description="Groups that held at least one correct episode.")
    mixed_groups: int = Field(description="Groups whose episodes differ in correctness (these teach).")
    families: dict[str, dict[str, float]] = Field(default_factory=dict, description="The same, per family.")
    warning: str | None = Field(
        default=None,
        exclude=True,  # the summary stores it as ``no_signal``, beside the counts
        description="A sentence when no group held a correct episode (the run could not raise accuracy).",
    )


class RLSummary(StepSummary):
    """What an RL step did, as its lineage records it."""

    steps_planned: int = Field(description="Optimizer steps of the plan in force at the end.")
    steps_run: int = Field(description="The global step reached (resumed steps included).")
    rollouts: int = Field(description="Episodes generated over the whole run.")
    device: str = Field(description="Where it trained (cpu, cuda, …).")
    train_runtime_s: float = Field(description="Wall time of the training loop in the last call.")
    final_reward: float | None = Field(default=None, description="Mean reward at the last logged step.")
    final_entropy: float | None = Field(default=None, description="Entropy at the last logged step.")
    curves: tuple[dict[str, float], ...] = Field(
        default=(), description="Per logged step (thinned to about 50): reward, its terms, entropy, …"
    )
    heldout: tuple[dict[str, float], ...] = Field(
        default=(), description="Per held-out evaluation: step, correct, format_valid, reward, tokens."
    )
    alarm: str | None = Field(default=None, description="The reward-hacking alarm's first firing.")
    learning_signal: LearningSignal | None = Field(
        default=None, description="Episodes and groups with a correct episode (overall and per family)."
    )
    no_signal: str | None = Field(default=None, description="Set when too few groups can teach anything.")
    family_choice: FamilyChoice | None = Field(default=None, description="With rl.families: auto.")


class RLCollapsed(StepSummary):
    """What a stopped RL step reports: the entropy guard's message (the rollouts are committed)."""

    entropy_collapse: str = Field(description="Why the entropy guard stopped the run.")
