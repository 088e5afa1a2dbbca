"""One episode of a policy on one prompt: the token record RL trains on and evaluation scores.

The completion is a sequence of pieces, each either *sampled* (ids exactly as the policy returned
them, their logprobs, mask 1) or *environment* (the newline that closes a model's block, an
observation rendered canonically and encoded on its own, mask 0, logprob ``None``). Nothing the
model wrote is ever re-tokenized. ``text`` is the decode of all completion ids.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

EpisodeFinish = Literal["answer", "eos", "format_error", "generation_limit", "token_limit", "turn_limit"]


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A tool the episode ran: its argument, its error (None when it worked), and when."""

    tool: str
    argument: str
    error: str | None
    seconds: float
    started_at: float


@dataclasses.dataclass
class Episode:
    """The record of one episode (filled in by :mod:`coa.rollout.engine`)."""

    task_id: str
    sample_index: int
    prompt_ids: list[int]
    completion_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float | None] = dataclasses.field(default_factory=list)
    mask: list[int] = dataclasses.field(default_factory=list)
    pieces: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    """``[start, end)`` of each generation and each environment piece in ``completion_ids``."""
    text: str = ""
    turns: int = 0
    tool_calls: list[ToolCall] = dataclasses.field(default_factory=list)
    duplicate_calls: int = 0
    """Search/crawl calls refused as repeats of an earlier call (``duplicate_calls: refuse``)."""
    context_cuts: int = 0
    """Generations that saw a cut context (``max_context_tokens``)."""
    policy_versions: list[int | None] = dataclasses.field(default_factory=list)
    """Per generation, the weight version the policy sampled it with (None: not reported)."""
    old_kv: bool = False
    """Some generation ran across a weight push that kept its KV cache (:attr:`Generation.old_kv`)."""
    finish: EpisodeFinish | None = None
    error: str | None = None
    format_error: str | None = None
    generation_s: float = 0.0
    tool_s: float = 0.0
    started_at: float = 0.0
    ended_at: float = 0.0

    @property
    def wall_s(self) -> float:
        return self.ended_at - self.started_at

    @property
    def completion_tokens(self) -> int:
        """Tokens the model generated (environment tokens excluded)."""
        return sum(self.mask)

    def add_sampled(self, ids: Sequence[int], logprobs: Sequence[float]) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} logprobs")
        self.pieces.append((len(self.completion_ids), len(self.completion_ids) + len(ids)))
        self.completion_ids.extend(ids)
        self.logprobs.extend(logprobs)
        self.mask.extend([1] * len(ids))

    def add_environment(self, ids: Sequence[int]) -> None:
        self.pieces.append((len(self.completion_ids), len(self.completion_ids) + len(ids)))
        self.completion_ids.extend(ids)
        self.logprobs.extend([None] * len(ids))
        self.mask.extend([0] * len(ids))

    def end(self, finish: EpisodeFinish, error: str | None = None) -> None:
        self.finish, self.error = finish, error
