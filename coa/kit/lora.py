"""LoRA adapters instead of all weights, for every recipe: the settings (:class:`LoraSettings`, the
``lora`` section of ``sft`` and, with RL's defaults, of ``rl``) and the ``peft`` config they make
(:func:`peft_config_of`). Light to import: ``peft`` is imported only by :func:`peft_config_of`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from coa.config import StrictModel
from coa.kit.recipe import TrainError

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraSettings(StrictModel):
    """Train LoRA adapters instead of all weights (needs ``peft``)."""

    r: int = Field(default=16, ge=1, description="Rank of the adapters.")
    alpha: int = Field(default=32, ge=1, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(default=0.05, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: tuple[str, ...] = Field(
        default=DEFAULT_LORA_TARGETS, min_length=1, description="Names of the linear layers to adapt."
    )


def peft_config_of(lora: LoraSettings, error: type[TrainError] = TrainError) -> Any:
    """The ``peft.LoraConfig`` of the run's LoRA settings; ``error`` (the recipe's) if peft is missing."""
    try:
        from peft import LoraConfig
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise error("lora needs the `peft` package (pip install peft)") from e
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
