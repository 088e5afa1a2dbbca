"""Where a step's per-shard work runs: in the step's own process, or fanned out to an engine (Ray).

The domain code only knows the small :class:`ShardExecutor` interface: ``map(fn, items, name)``
runs ``fn`` on every item and returns the results in the items' order. A step whose work splits
into independent shards (collection: ranges of the planned runs; curation: the scoring of row
ranges; conversion: the SFT examples of row ranges) hands its shards to the executor it receives
and merges what they wrote, in plan order, so the committed artifact does not depend on where the
shards ran. The Ray executor (Prefect tasks
on a Ray cluster through ``prefect-ray``) lives in :mod:`tasks.fanout`: ``coa`` imports neither
Prefect nor Ray. With ``execution.engine: local`` (the default) there is no executor and every
step runs in one process exactly as before.

``fn`` and the items travel to other processes (pickled), so ``fn`` is a module-level function and
each item carries everything its shard needs (configs, URIs), nothing bound to this process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol, TypeVar

from pydantic import Field

from coa.config import StrictModel

T = TypeVar("T")
R = TypeVar("R")


class ExecutionConfig(StrictModel):
    """Where the shards of collection, curation and conversion run (not part of any artifact's identity)."""

    engine: Literal["local", "ray"] = Field(
        default="local",
        description="local: every step in one process (the embedded default); ray: the shards of collection, "
        "of curation's scoring and of conversion run as Prefect tasks on a Ray cluster (prefect-ray).",
    )
    address: str | None = Field(
        default=None,
        description="Ray cluster address (e.g. ray://head:10001 or auto); null = the RAY_ADDRESS environment "
        "variable, and without it a local Ray started on the fly for the run.",
    )
    shards: int = Field(
        default=8,
        ge=1,
        description="Shards a step's work is split into (contiguous ranges of the planned runs or rows), "
        "each resumable on its own. More shards than workers balance the load; fewer mean less overhead.",
    )
    num_cpus: int | None = Field(
        default=None,
        ge=1,
        description="CPUs of the local Ray started on the fly (null = all of the machine's); ignored when "
        "connecting to a cluster.",
    )
    flush_seconds: float = Field(
        default=5.0,
        ge=0,
        description="A shard checkpoints its finished runs at least this often (0 = each run at once): "
        "what a killed worker can lose and its re-run redoes.",
    )
    max_retries: int = Field(
        default=3,
        ge=0,
        description="Times Ray re-runs a shard whose worker died (killed, lost node); the re-run resumes "
        "from the shard's checkpoints.",
    )


class ShardExecutor(Protocol):
    """Runs independent shards of a step somewhere; results come back in the items' order."""

    @property
    def shards(self) -> int:
        """How many shards a step should split its work into."""
        ...

    @property
    def flush_seconds(self) -> float:
        """How often a shard checkpoints what it finished."""
        ...

    def map(self, fn: Callable[[T], R], items: Sequence[T], name: str) -> list[R]:
        """``[fn(item) for item in items]``, run wherever the executor runs shards."""
        ...


class InProcessExecutor:
    """Runs the shards one after another in this process (tests and debugging of the sharded path)."""

    def __init__(self, shards: int = 4, flush_seconds: float = 5.0) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self._shards, self._flush_seconds = shards, flush_seconds

    @property
    def shards(self) -> int:
        return self._shards

    @property
    def flush_seconds(self) -> float:
        return self._flush_seconds

    def map(self, fn: Callable[[T], R], items: Sequence[T], name: str) -> list[R]:
        return [fn(item) for item in items]


def shard_ranges(total: int, shards: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of at most ``shards`` contiguous, non-empty, near-equal ranges covering ``total``."""
    shards = max(1, min(shards, total))
    bounds = [total * k // shards for k in range(shards + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(shards) if bounds[k] < bounds[k + 1]]
