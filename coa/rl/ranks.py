"""RL on several ranks (``torchrun`` / ``accelerate launch``, DDP, FSDP2 or DeepSpeed ZeRO-3): what each
rank generates and how the ranks agree.

* **The batch is the plan's whatever the rank count**: each rank takes ``prompts_per_step / N``
  prompts of a generation batch (:func:`rank_batch`); TRL's sampler repeats each prompt
  ``group_size`` times consecutively and a rank's slice is a multiple of ``group_size``, so every
  GRPO group is generated, scored and trained whole on one rank.
* **Generation on the whole model**: :func:`generation_model` is TRL's
  ``unwrap_model_for_generation`` (ZeRO-3's shards gathered into every rank for the rollout), entered
  by every rank. The episodes then decode on the gathered weights with no collective inside, so a rank
  that finishes its episodes early (fewer turns, shorter answers, no refill round) never leaves another
  waiting in a decoder step; the ranks meet again at TRL's gather of the rewards.
  **FSDP2** gathers layer by layer in each forward (a collective per decoding step, which ranks that
  decode different numbers of steps would hang in), so for generation every FSDP2 group is unsharded
  once, on entry, with its reshard-after-forward turned off (:func:`coa.kit.fsdp.gathered`):
  the decoding forwards then run on whole local weights with no collective, and the groups are
  resharded on the way out. Chosen over HF's ``synced_gpus`` (every rank runs a forward as long as
  the longest rank decodes, turn after turn, while a rank's multi-turn episodes are its own, tools in
  between) and over a second, gathered copy of the model (the memory of the unsharded groups plus a
  copy per generation batch). Under **ZeRO-3** TRL's gather leaves DeepSpeed's root start-of-forward
  hook in place (its ``reset_step`` broadcasts at each forward until its trace is complete; deepspeed
  0.19.8), so it is detached for the block too (:func:`_without_zero3_step_hook`). Both are proven
  on 2 CPU ranks (tests/rl/test_ranks.py; ZeRO-3 where deepspeed installs). FSDP1 is refused with
  the in-process backends.
* **One decision, taken on rank 0**: the rollout rows (:func:`gather_all`, written by rank 0 in
  rank order) and the held-out score and alarm (:func:`from_main`, computed on rank 0 and broadcast)
  are the same on every rank; so is whether a refill round of dynamic sampling starts
  (:func:`refill_decision`: one all-reduce of two numbers per round, rank 0's clock against the
  time budget's deadline), so a rank never refills past a deadline that another rank's clock has
  not reached yet. The rollout metrics each rank logs are the batch's over every rank (the ranks'
  counts and sums pooled, :func:`coa.rl.rollouts.pool_tallies`), and the rewards TRL gathers itself
  for the group advantages.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any, TypeVar

from coa.rl.config import RLError, RLStageConfig
from coa.rl.rollouts import RefillDecision, own_decision

T = TypeVar("T")

refill_log = logging.getLogger("coa.rl.refills")
"""Each refill decision on several ranks, per rank, at DEBUG (the multi-rank tests read them)."""


def launched_world_size() -> int:
    """The number of ranks this process was launched among (``WORLD_SIZE`` of torchrun / accelerate)."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def rank_batch(params: RLStageConfig, world_size: int) -> int:
    """Episodes each rank trains per optimizer step (TRL's ``per_device_train_batch_size``), so that
    ``world_size`` ranks together train the plan's ``prompts_per_step`` groups a generation batch."""
    if params.prompts_per_step % world_size:
        raise RLError(
            f"prompts_per_step ({params.prompts_per_step}) must be a multiple of the number of ranks "
            f"({world_size}): each rank generates and trains whole groups (set prompts_per_step to a "
            "multiple of num_processes)"
        )
    per_rank = params.episodes_per_generation // world_size
    if per_rank % params.steps_per_generation:
        raise RLError(
            f"a rank's episodes per generation batch ({per_rank} = prompts_per_step * group_size / "
            f"{world_size} ranks) must be a multiple of steps_per_generation ({params.steps_per_generation})"
        )
    return per_rank // params.steps_per_generation


def rank_of(trainer: Any) -> tuple[int, int]:
    """``(rank, world_size)`` of this process in ``trainer``'s run."""
    accelerator = trainer.accelerator
    return int(accelerator.process_index), int(accelerator.num_processes)


@contextlib.contextmanager
def generation_model(trainer: Any) -> Iterator[Any]:
    """The trainer's whole model for generation, on every rank (see the module doc); every rank must
    enter it together (ZeRO-3's gather is a collective)."""
    from trl.distributed import DistributedBackend
    from trl.models.utils import unwrap_model_for_generation

    from coa.kit import fsdp

    accelerator = trainer.accelerator
    if fsdp.is_sharded(trainer.model_wrapped):
        with fsdp.gathered(trainer.model_wrapped) as model:
            yield model
        return
    if accelerator.num_processes > 1 and DistributedBackend(accelerator).fsdp_version == 1:
        raise RLError(
            "rl.rollout.backend: hf / hf_batched under FSDP1: its forward gathers each layer from all ranks, "
            "and ranks decode different numbers of steps (a hang); use infra/accelerate/fsdp2.yaml, DDP or "
            "DeepSpeed ZeRO-3 (rl.accelerate_config), or generate on a server (rl.rollout.backend: server)"
        )
    with (
        unwrap_model_for_generation(
            trainer.model_wrapped, accelerator, gather_deepspeed3_params=True
        ) as model,
        _without_zero3_step_hook(trainer.model_wrapped),
    ):
        yield model


@contextlib.contextmanager
def _without_zero3_step_hook(engine: Any) -> Iterator[None]:
    """ZeRO-3's root forward pre-hook detached for the block, put back after (nothing elsewhere).

    TRL's ``unwrap_model_for_generation`` removes DeepSpeed's per-module hooks but not this one
    (``DeepSpeedZeRoOffload.fwd_pre_hook``, deepspeed 0.19.8), whose ``reset_step`` checks the module
    order across ranks with a broadcast at every forward until its trace is complete: a collective per
    decoding step (seen on 2 CPU ranks: rank 0 scoring the held-out prompts alone met rank 1's next
    broadcast, and both failed)."""
    offload = getattr(getattr(engine, "optimizer", None), "parameter_offload", None)
    handle: Any = getattr(offload, "fwd_pre_hook", None)
    hooks: Any = getattr(getattr(offload, "module", None), "_forward_pre_hooks", None)
    if handle is None or hooks is None or handle.id not in hooks:  # not ZeRO-3: nothing to detach
        yield
        return
    hook = hooks.pop(handle.id)
    try:
        yield
    finally:
        hooks[handle.id] = hook


def gather_all(trainer: Any, items: list[T]) -> list[T]:
    """Every rank's ``items`` joined in rank order on every rank (one process: ``items``)."""
    if trainer.accelerator.num_processes == 1:
        return items
    from accelerate.utils import gather_object

    return list(gather_object(items))


def from_main(trainer: Any, value: T) -> T:
    """Rank 0's ``value`` on every rank (one process: ``value``)."""
    if trainer.accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box, from_process=0)
    return box[0]


def refill_decision(trainer: Any) -> RefillDecision:
    """Whether a refill round starts, the same on every rank (one process: :func:`own_decision`).

    Every rank calls it once per round of a batch until it says no (a collective): it sums each
    rank's wish (short of groups, prompts left) and rank 0's verdict on the deadline in one
    all-reduce of two numbers. A round starts when some rank wants one and rank 0's clock has not
    passed the deadline; the other ranks' clocks are not asked.
    """
    index, world = rank_of(trainer)
    if world == 1:
        return own_decision

    def decide(step: int, round_: int, wanted: bool, open_: bool) -> bool:
        import torch
        import torch.distributed as dist

        device = torch.device("cpu")
        if dist.get_backend() == "nccl":  # NCCL moves only CUDA tensors
            device = torch.device("cuda", torch.cuda.current_device())
        flags = torch.tensor([float(wanted), float(index == 0 and not open_)], device=device)
        dist.all_reduce(flags)
        wanted_by, closed = int(flags[0].item()), bool(flags[1].item() > 0)
        starts = wanted_by > 0 and not closed
        refill_log.debug(
            "rank %d step %d refill round %d: %s (wanted by %d rank(s); rank 0's deadline %s; this rank's "
            "clock says %s)",
            index, step, round_, "starts" if starts else "none", wanted_by,
            "passed" if closed else "open", "open" if open_ else "passed",
        )  # fmt: skip
        return starts

    return decide
