"""Shared pieces of the rollout tests: canonical blocks, a spy toolbox, a recording policy wrapper."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from coa.rollout import Generation, Sampling
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.tools.toolbox import ToolResult

CHATML = "<|im_start|>system\n{}<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def blocks(*pairs: tuple[str, str]) -> str:
    """Canonical blocks without the final newline (a generation ends at its closing tag)."""
    return "".join(f"<{tag}>\n{body}\n</{tag}>\n" for tag, body in pairs).removesuffix("\n")


def code_turn(program: str) -> str:
    return blocks(
        ("plan", "Compute it with code."), ("think", "Run it."), ("code", f"```python\n{program}\n```")
    )


ANSWER = blocks(("reflection", "It printed 42."), ("think", "Answer."), ("answer", "\\boxed{42}"))


class SpyToolBox:
    """Answers every call with ``observations[argument]`` (default ``"42"``) after ``delays[argument]``."""

    def __init__(
        self, observations: Mapping[str, str] | None = None, delays: Mapping[str, float] | None = None
    ) -> None:
        self.observations = dict(observations or {})
        self.delays = dict(delays or {})
        self.calls: list[tuple[str, str]] = []

    @property
    def tools(self) -> tuple[str, ...]:
        return ("code", "web_search")

    async def call(self, name: str, argument: str) -> ToolResult:
        self.calls.append((name, argument))
        delay = next((d for key, d in self.delays.items() if key in argument), 0.0)
        if delay:
            await asyncio.sleep(delay)
        return ToolResult(next((o for key, o in self.observations.items() if key in argument), "42"))


class Recording(ScriptedPolicy):
    """A scripted policy that also keeps every generation it returned."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.generations: list[Generation] = []

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        generation = await super().generate(prompt_ids, max_new_tokens, sampling)
        self.generations.append(generation)
        return generation
