"""How a build reports how far it is, and its live figures (a runner concern with no effect on
what a step computes: in no step's key, :data:`coa.version.UNKEYED`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

Progress = Callable[[int, int], None]
"""How a build reports how far it is: ``progress(done, planned)`` (runs, optimizer steps, tasks)."""


@runtime_checkable
class LiveMetrics(Protocol):
    """A :data:`Progress` that also takes the build's live figures (``loss``, ``reward``,
    ``tokens_per_s``): a build that has them checks ``isinstance(progress, LiveMetrics)`` and calls
    :meth:`metrics` as they come; a plain ``progress(done, planned)`` function is still enough."""

    def __call__(self, done: int, total: int) -> None: ...

    def metrics(self, values: Mapping[str, float]) -> None: ...


SHOWN = ("loss", "reward")
"""Live figures a one-line progress shows (the Prefect progress artifact's description, the CLI's bar);
a live table shows all of them."""


def figures_text(values: Mapping[str, float]) -> str:
    """The live figures of a one-line progress: ``loss 2.31, 1,204 tokens/s`` (empty without any)."""
    parts = [f"{k} {v:.4g}" for k, v in values.items() if k in SHOWN]
    if "tokens_per_s" in values:
        parts.append(f"{values['tokens_per_s']:,.0f} tokens/s")
    return ", ".join(parts)
