"""FSDP2 on CPU ranks: the recipe shards the model itself where accelerate's FSDP does not take (one
implementation for SFT and RL).

``accelerate launch`` with an FSDP2 config (``distributed_type: FSDP``, ``fsdp_version: 2``: the
shipped ``infra/accelerate/fsdp2.yaml``) sets ``ACCELERATE_USE_FSDP=true`` and ``FSDP_VERSION=2`` in
every rank, but accelerate 1.15 turns FSDP on for accelerator ranks only (``accelerate/state.py``: GPU,
NPU, XPU, ...): on CPU ranks (gloo) it would run plain DDP, each rank holding the whole model. There
(:func:`cpu_fsdp2_requested`) the recipe applies PyTorch's FSDP2 itself (:func:`shard`), as
accelerate's FSDP2 path does on GPUs: ``fully_shard`` on each decoder layer (the model's
``_no_split_modules``), then on the root (the embedding, the tied LM head and the final norm), over a
CPU device mesh of the ranks. Each parameter becomes a ``DTensor`` of which a rank holds 1/N; a
layer's weights are all-gathered for its forward and backward, its gradients reduce-scattered
(averaged, as DDP averages). The model is marked as prepared, so accelerate does not wrap it in DDP
too (``Accelerator.prepare_model`` returns a model it has prepared as it is); gradient clipping
works on the DTensor gradients as on tensors. :func:`install` does it for a built trainer, whose
``save_model`` then gathers the full state dict (a collective, every rank) and rank 0 writes an
ordinary ``from_pretrained`` folder. :func:`gathered` holds the whole model on every rank for RL's
in-process generation (see :mod:`coa.rl.ranks`).

Why not ``transformers``' own load-time FSDP2 (``from_pretrained(distributed_config=
DistributedConfig(fsdp_size=N))``), which the ``Trainer`` also supports: measured on the tiny model
(tied embeddings) under transformers 5.23, its plan wraps the embedding in a group of its own while
the tied LM head stays outside it, and from the second step its losses left a one-process run's
(plain SGD, lr 0.5, same batch: 5.781 against 5.686 after one step), where layers + root matched to
the digit (5.686248 both).

**What it does not do**: LoRA and SFT's time budget are refused up front (:func:`check_supported`);
and resume. A rank's optimizer state is a shard; the ``Trainer`` saves rank 0's
only, so checkpoints of such a run hold the gathered weights alone (``save_only_model``) and a rerun
of a killed FSDP2-on-CPU run is refused with the folder to delete (:func:`check_no_resume`). GPU
FSDP2 runs (accelerate's path) checkpoint their sharded optimizer and resume.

:func:`shard_summary` tells a sharded model from a copy: the parameter elements this rank holds
against the model's (FSDP2's DTensor shards or ZeRO-3's partitions), logged by each rank
(:func:`describe_shards`: ``rank R fsdp2 shards (...): H of T parameter elements ...``).
"""

from __future__ import annotations

import contextlib
import os
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from coa.kit import ranks


def cpu_fsdp2_requested() -> bool:
    """Whether this process is a rank of an ``accelerate launch`` with an FSDP2 config, on several CPU
    ranks (no CUDA): where accelerate runs DDP instead and the recipe shards the model itself."""
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() != "true" or os.environ.get("FSDP_VERSION") != "2":
        return False
    if ranks.world_size() < 2:
        return False
    import torch

    return not torch.cuda.is_available()


def check_supported(section: str, error: type[Exception], lora: bool, time_budget: bool = False) -> None:
    """Refuse what this path does not do (before anything is built): LoRA (the merge of the adapter into
    sharded weights would run on rank 0 alone, a collective no other rank joins) and SFT's time budget
    (its calibration trains a copy of the model, which is sharded here)."""
    if lora:
        raise error(
            f"{section}.lora under FSDP2 on CPU ranks is not supported (the adapter merge needs the whole "
            f"model on rank 0): run {section} with LoRA under DDP (infra/accelerate/ddp.yaml or launcher "
            "torchrun), whose frozen base is a plain copy per rank"
        )
    if time_budget:
        raise error(
            f"{section}.time_budget_s under FSDP2 on CPU ranks: the calibration trains a copy of the model, "
            f"which is sharded here; give {section}.max_steps instead, or run under DDP (ddp.yaml / torchrun)"
        )


def shard(model: Any) -> Any:
    """Apply FSDP2 to ``model`` (in place; returned) over all ranks of this run: each decoder layer a
    group of its own, the rest (embedding, tied head, final norm) the root's; see the module doc."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    base = getattr(model, "get_base_model", lambda: model)()
    layer_classes = set(getattr(base, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in layer_classes]
    if not layers:
        raise ValueError(f"{type(base).__name__} names no decoder layer class (_no_split_modules) to shard")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model._is_accelerate_prepared = True  # accelerate then leaves it as it is (no DDP around FSDP2)
    return model


def is_sharded(model: Any) -> bool:
    """Whether ``model`` is an FSDP2 module (:func:`shard` applied)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def full_state_dict(model: Any) -> dict[str, Any]:
    """The whole model's state dict, gathered to plain CPU tensors on rank 0 (``{}`` on the others);
    a collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def install(trainer: Any) -> None:
    """Shard ``trainer``'s model (:func:`shard`), before its optimizer exists, and make its ``save_model``
    (the final model and every checkpoint's weights) save the whole model: the full state dict gathered
    by every rank, written by the trainer's own ``_save`` on rank 0 (a ``from_pretrained`` folder)."""
    trainer.model = trainer.model_wrapped = shard(trainer.model)

    def save_model(self: Any, output_dir: str | None = None, _internal_call: bool = False) -> None:
        state = full_state_dict(self.model)
        self._save(str(output_dir or self.args.output_dir), state_dict=state)

    trainer.save_model = types.MethodType(save_model, trainer)


@contextlib.contextmanager
def gathered(model: Any) -> Iterator[Any]:
    """``model`` (an FSDP2 module) with every parameter gathered whole on this rank until the block ends:
    each group unsharded once (a collective: every rank enters together) and kept so through any number
    of forwards, which then run with no collective, so ranks may decode different numbers of steps. The
    groups are resharded (local, no collective) and their reshard-after-forward restored on the way out."""
    from torch.distributed.fsdp import FSDPModule

    groups = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for group in groups:
        group.set_reshard_after_forward(False)
    for group in groups:
        group.unshard()
    try:
        yield model
    finally:
        for group in groups:
            group.reshard()
            group.set_reshard_after_forward(True)


def describe_shards(trainer: Any) -> str | None:
    """``"fsdp2 shards (...): <shard_summary>"`` for a model sharded here, ``"zero3 shards (DeepSpeed):
    ..."`` under ZeRO-3 on several ranks (partitioned at load by ``zero.Init``), None for a whole copy."""
    if is_sharded(trainer.model):
        return f"fsdp2 shards (fully_shard on CPU ranks): {shard_summary(trainer.model)}"
    if getattr(trainer, "is_deepspeed_enabled", False) and ranks.world_size() > 1:
        return f"zero3 shards (DeepSpeed): {shard_summary(trainer.model)}"
    return None


def shard_summary(model: Any) -> str:
    """What this rank holds of ``model``: ``"H of T parameter elements (P%; D sharded parameters)"``, for
    FSDP2 (``DTensor`` parameters: their local shard) and DeepSpeed ZeRO-3 (``ds_tensor``: the rank's
    partition of a parameter of ``ds_numel`` elements) alike; a whole copy reads 100%."""
    from torch.distributed.tensor import DTensor

    held = total = sharded = 0
    for param in model.parameters():
        if isinstance(param, DTensor):
            sharded += 1
            held, total = held + param.to_local().numel(), total + param.numel()
        elif hasattr(param, "ds_tensor"):  # DeepSpeed ZeRO-3 partitioned
            sharded += 1
            held, total = held + param.ds_tensor.numel(), total + int(param.ds_numel)
        else:
            held, total = held + param.numel(), total + param.numel()
    share = 100 * held / max(1, total)
    return f"{held} of {total} parameter elements ({share:.1f}%; {sharded} sharded parameters)"


def check_no_resume(checkpoint: Path | None, section: str, error: type[Exception]) -> None:
    """Refuse to resume an FSDP2-on-CPU run from ``checkpoint`` (it holds no optimizer state)."""
    if checkpoint is None or not cpu_fsdp2_requested():
        return
    raise error(
        f"cannot resume {checkpoint.name} of an FSDP2 run on CPU ranks: its checkpoints hold no optimizer "
        f"state (each rank's is a shard); delete {checkpoint.parent} to train from the start, or run "
        f"{section} under DDP (infra/accelerate/ddp.yaml or launcher torchrun), which resumes"
    )
