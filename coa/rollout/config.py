"""Configuration of a rollout run: limits, concurrency, sampling (light to import: no torch).

:class:`RolloutLimits` holds when an episode stops, what the environment does with repeated
calls and long contexts, and how the engine schedules the episodes (``schedule``). It is declared
once here and embedded (inherited, so the YAML keys stay flat) by every caller of the engine:
:class:`RolloutConfig` (the engine's own config), ``SampleConfig`` (``sampling.max_turns``),
``EvalConfig`` (``evaluate.max_turns``) and ``RLStageConfig`` (``rl.max_turns``). A caller whose default
differs restates only the default, with the type alias declared here (``MaxTurns`` …).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import Field

from coa.config import StrictModel

MaxTurns = Annotated[int, Field(ge=1, description="Model generations per episode (one per tool call + 1).")]
MaxNewTokens = Annotated[int, Field(ge=1, description="Tokens one generation may produce.")]
MaxTotalTokens = Annotated[
    int,
    Field(ge=1, description="Generated tokens per episode over all turns (observations not counted)."),
]
DuplicateCalls = Annotated[
    Literal["run", "refuse"],
    Field(
        description="A search or crawl call identical to an earlier one in the same episode: refuse "
        "(AFM's guard: not run, a canned observation says it was done before) or run it again. Code "
        "calls always run."
    ),
]
MaxContextTokens = Annotated[
    int | None,
    Field(
        ge=64,
        description="AFM's context management: when prompt + completion + the next generation would pass "
        "this many tokens, the policy sees the prompt, every piece holding a <plan> or <reflection>, and "
        "the most recent pieces that fit (the episode's record keeps everything; 32768 in AFM's web-agent "
        "evaluation). None = never cut.",
    ),
]
Schedule = Annotated[
    Literal["auto", "async", "lockstep"],
    Field(
        description="async: every episode advances on its own, tools run while others generate, and a "
        "batching policy batches whatever requests are waiting, so batches (and sampled ids) follow "
        "timing; lockstep: every live episode generates in one wave, in a fixed order, then the wave's "
        "tools run, so an in-process policy (hf) decodes the same batches on every run and a seeded run "
        "repeats token for token on one machine; auto: lockstep for a policy that decodes waves itself "
        "(hf), async for the others (completions servers, continuous batching).",
    ),
]


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Decoding parameters of one request; ``temperature == 0`` is greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


GREEDY = Sampling()


class RolloutLimits(StrictModel):
    """When an episode stops, how the environment treats repeated calls and long contexts, and how
    the engine schedules episodes."""

    max_turns: MaxTurns = 8
    max_new_tokens: MaxNewTokens = 256
    max_total_tokens: MaxTotalTokens = 1536
    duplicate_calls: DuplicateCalls = "refuse"
    max_context_tokens: MaxContextTokens = None
    schedule: Schedule = "auto"

    def limits(self) -> dict[str, Any]:
        """The :class:`RolloutLimits` fields of this config, to build a :class:`RolloutConfig` from."""
        return {name: getattr(self, name) for name in RolloutLimits.model_fields}


class RolloutConfig(RolloutLimits):
    """The engine's limits (:class:`RolloutLimits`), how many episodes run at once, and sampling."""

    concurrency: int = Field(
        default=128,
        ge=1,
        description="Episodes in flight at once (async: each advances on its own; lockstep: one wave).",
    )
    temperature: float = Field(default=0.0, ge=0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass (1 = off).")
    top_k: int = Field(default=0, ge=0, description="Top-k sampling cut (0 = off).")
    close_with_eos: bool = Field(
        default=False,
        description="Append the end-of-turn id (environment, mask 0) after a final answer, so a trainer "
        "that treats a completion not ending in EOS as truncated (TRL) counts it as finished.",
    )

    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)
