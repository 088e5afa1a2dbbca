"""The SFT loss's kernels: Liger's fused linear cross-entropy where it can run, the plain loss elsewhere.

``sft.liger_kernel`` (``auto`` / ``true`` / ``false``) picks Liger (``liger-kernel``, Triton kernels:
CUDA only). With it, :func:`liger_loss` computes the causal-LM loss at the positions whose next
token is trained (as :func:`coa.train.sft_trainer.trained_positions_loss` does) with
``liger_fused_linear_cross_entropy``: the LM head's projection and the softmax run chunk by chunk,
so the ``tokens x vocabulary`` logits (151,936 wide for Qwen2.5) are never held in memory, and
:func:`apply_layer_kernels` swaps in Liger's RMSNorm, RoPE and SwiGLU. Where Liger or Triton cannot
run (no CUDA, the package absent, Triton absent), :func:`resolve_liger` says why in one log line
and the run keeps the other loss paths (``fused_lm_head``, ``head_positions``): asking for Liger is
never the reason a run fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from typing import Any, Literal

from coa.format import IGNORE_INDEX

log = logging.getLogger("coa.train.sft")

LigerSetting = bool | Literal["auto"]


def liger_unavailable(cuda: bool) -> str | None:
    """Why Liger's kernels cannot run here (``None`` when they can): no CUDA, or a package missing."""
    if not cuda:
        return "Liger's kernels are Triton kernels and need a CUDA GPU (this run has none)"
    for package, what in (("triton", "Triton"), ("liger_kernel", "liger-kernel")):
        if importlib.util.find_spec(package) is None:
            return (
                f"{what} is not installed (pip install 'coa-pipeline[gpu-train]', or carry its wheel: "
                "infra/gpu-prepare.sh)"
            )
    try:
        importlib.import_module("liger_kernel.transformers.functional")
    except Exception as e:  # a Triton or torch too old or too new for this Liger: any import error
        return f"liger-kernel does not import here ({type(e).__name__}: {e})"
    return None


def resolve_liger(setting: LigerSetting, cuda: bool) -> bool:
    """Whether a run uses Liger: ``auto`` = where it can run; ``true`` falls back, with a warning
    saying why, where it cannot; ``false`` never."""
    if setting is False:
        return False
    reason = liger_unavailable(cuda)
    if reason is None:
        return True
    if setting is True:
        log.warning("sft.liger_kernel: %s; training with the standard loss path instead", reason)
    else:
        log.info("sft.liger_kernel=auto: off (%s)", reason)
    return False


def apply_layer_kernels(model: Any) -> None:
    """Liger's RMSNorm, RoPE and SwiGLU in the model's layers, in place (the loss is :func:`liger_loss`'s)."""
    from liger_kernel.transformers.monkey_patch import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(
        model=model,
        rope=True,
        rms_norm=True,
        swiglu=True,
        cross_entropy=False,
        fused_linear_cross_entropy=False,
    )


def liger_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
    """The causal-LM loss of ``inputs`` by Liger's fused linear cross-entropy, at the trained positions.

    The same loss as the model's own (labels shifted by one, ``-100`` ignored, summed over
    ``num_items_in_batch`` when given, else averaged over the trained tokens). Packed rows keep their
    ``position_ids`` and no attention mask, so the block-diagonal mask is the model's as usual.
    """
    import torch
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    labels = inputs["labels"]
    features = {k: v for k, v in inputs.items() if k != "labels"}
    features["use_cache"] = False  # a cache turns off the model's packed-sequence (block-diagonal) mask
    hidden = model.model(**features).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    trained = targets != IGNORE_INDEX
    head = model.lm_head
    total = liger_fused_linear_cross_entropy(
        hidden[trained], head.weight, targets[trained], bias=head.bias, reduction="sum"
    )
    count = num_items_in_batch if num_items_in_batch is not None else trained.sum()
    return total / torch.as_tensor(count, device=total.device).clamp(min=1)
