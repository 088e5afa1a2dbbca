"""Several ranks, one run: the world a trainer process is in, the global batch split over its ranks,
and a decision made on rank 0 that every rank follows.

The run config's batch is the **global** batch: ``batch_size * grad_accumulation`` examples (or packed
rows) per optimizer step, whatever the number of ranks. A launcher (``torchrun``, ``accelerate
launch``) sets ``WORLD_SIZE`` and ``RANK`` before the trainer starts, so :func:`split_batch` turns the
plan's batch into each rank's at build time: the accumulation is divided first (each rank keeps the
micro-batch, so its memory is what one process needed), else the micro-batch; a global batch that
N ranks cannot share evenly is refused with the numbers that would fit. Without the split, each of N
ranks took ``batch_size`` examples and the global batch grew N-fold (seen with torchrun on 2 CPU
ranks: the epoch advanced twice as fast per step).

:func:`broadcast_from_rank0` is how ranks agree on a value each would compute differently from its
own clock (a time budget's plan, a calibrated step time): rank 0's value, sent to all (a no-op in one
process). Light to import: torch is imported only when a process group is up.
"""

from __future__ import annotations

import dataclasses
import os


def world_size() -> int:
    """The number of ranks of this run, as the launcher set it (1 when not launched)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """This process's rank (0 when not launched)."""
    return int(os.environ.get("RANK", "0"))


@dataclasses.dataclass(frozen=True)
class RankBatch:
    """One rank's share of the global batch: ``world_size * per_rank * accumulation`` = the global batch."""

    per_rank: int
    """Examples (or packed rows) in one micro-batch of one rank."""
    accumulation: int
    """Micro-batches a rank accumulates per optimizer step."""
    world_size: int

    @property
    def global_batch(self) -> int:
        return self.world_size * self.per_rank * self.accumulation

    def describe(self) -> str:
        return (
            f"{self.world_size} rank(s) x {self.per_rank} per micro-batch x {self.accumulation} "
            f"accumulated = {self.global_batch} per optimizer step"
        )


def split_batch(batch_size: int, grad_accumulation: int, n_ranks: int, section: str = "sft") -> RankBatch:
    """Each rank's micro-batch and accumulation so that ``n_ranks`` of them take the global batch
    ``batch_size * grad_accumulation``; ``ValueError`` (naming the keys to change) when they cannot."""
    if n_ranks < 1:
        raise ValueError(f"a run needs at least one rank, got {n_ranks}")
    if grad_accumulation % n_ranks == 0:
        return RankBatch(batch_size, grad_accumulation // n_ranks, n_ranks)
    if batch_size % n_ranks == 0:
        return RankBatch(batch_size // n_ranks, grad_accumulation, n_ranks)
    total = batch_size * grad_accumulation
    if total % n_ranks == 0:  # e.g. 3 x 2 on 6 ranks: one example per rank, no accumulation
        share = total // n_ranks
        for accumulation in range(grad_accumulation, 0, -1):
            if share % accumulation == 0:
                return RankBatch(share // accumulation, accumulation, n_ranks)
    raise ValueError(
        f"the global batch {section}.batch_size x {section}.grad_accumulation = {batch_size} x "
        f"{grad_accumulation} = {total} cannot be shared by {n_ranks} ranks: make it a multiple of "
        f"{n_ranks} (e.g. {section}.grad_accumulation={n_ranks * grad_accumulation}) or change num_processes"
    )


def broadcast_from_rank0(value: float) -> float:
    """Rank 0's ``value`` on every rank (a collective: every rank must call it at the same point);
    ``value`` itself in one process or before the process group exists."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":  # NCCL moves only CUDA tensors
        device = torch.device("cuda", torch.cuda.current_device())
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(tensor, src=0)
    return float(tensor.item())
