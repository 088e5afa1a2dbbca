"""Configuration of a rollout run: limits, concurrency, sampling (light to import: no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.config import StrictModel
from coa.rollout.policy import Sampling


class RolloutConfig(StrictModel):
    """When an episode stops, how many run at once, and how tokens are sampled."""

    max_turns: int = Field(
        default=8, ge=1, description="Model generations per episode (one per tool call + 1)."
    )
    max_new_tokens: int = Field(default=256, ge=1, description="Tokens one generation may produce.")
    max_total_tokens: int = Field(
        default=1536,
        ge=1,
        description="Generated tokens per episode over all turns (observations not counted).",
    )
    concurrency: int = Field(
        default=128,
        ge=1,
        description="Episodes in flight at once; each advances on its own (no batch barrier).",
    )
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass (1 = off).")
    top_k: int = Field(default=0, ge=0, description="Top-k sampling cut (0 = off).")
    close_with_eos: bool = Field(
        default=False,
        description="Append the end-of-turn id (environment, mask 0) after a final answer, so a trainer "
        "that treats a completion not ending in EOS as truncated (TRL) counts it as finished.",
    )

    duplicate_calls: Literal["run", "refuse"] = Field(
        default="refuse",
        description="A search or crawl call identical to an earlier one in the same episode: refuse "
        "(AFM's guard: not run, a canned observation says it was done before) or run it again. Code "
        "calls always run.",
    )
    max_context_tokens: int | None = Field(
        default=None,
        ge=64,
        description="AFM's context management: when prompt + completion + the next generation would pass "
        "this many tokens, the policy sees the prompt, every piece holding a <plan> or <reflection>, and "
        "the most recent pieces that fit (the episode's record keeps everything). None = never cut.",
    )

    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)
