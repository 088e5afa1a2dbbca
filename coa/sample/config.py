"""Configuration of the sampling step: the student's k attempts per training task (light: no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.format.prompts import PromptStyle
from coa.rollout.config import RolloutLimits


class SampleConfig(RolloutLimits):
    """How the student samples the training tasks between SFT rounds; when an episode stops is
    :class:`~coa.rollout.config.RolloutLimits` (``max_turns``, ``max_new_tokens``, ``max_total_tokens``,
    ``duplicate_calls``, ``max_context_tokens``)."""

    name: str = Field(default="samples", description="Artifact name of the sampled rollouts.")
    samples: int = Field(default=4, ge=1, description="Episodes per training task (k).")
    temperature: float = Field(default=0.8, gt=0, description="Sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass (1 = off).")
    top_k: int = Field(default=0, ge=0, description="Top-k sampling cut (0 = off).")
    seed: int = Field(default=0, description="Seed of the sampler (torch's generator) for this step.")
    backend: Literal["hf_batched", "hf"] = Field(
        default="hf_batched",
        description="hf_batched = continuous batching in this process (a generation joins the running "
        "batch at the next decode step); hf = micro-batched `generate` calls.",
    )
    max_batch: int = Field(default=64, ge=1, description="Most generations decoded together.")
    concurrency: int = Field(default=128, ge=1, description="Episodes in flight at once.")
    families: tuple[str, ...] | None = Field(
        default=None, description="Sample only the training tasks of these families; null = all."
    )
    limit_per_family: int | None = Field(
        default=None, ge=1, description="First N training tasks of each family only; null = all."
    )
    prompt_style: PromptStyle | None = Field(
        default=None,
        description="System prompt style; null = the style of the conversion the sampled model was "
        "trained on, read from its lineage (none: full). Set: this style (an override).",
    )
    variants: dict[str, str] | None = Field(
        default=None,
        description="Family → CoA variant override; null = the model's conversion's (from its lineage).",
    )
