"""The ``peft`` config of a recipe's LoRA settings (:class:`coa.kit.config.LoraSettings`), for every
recipe (SFT's trainer, GRPO's). ``peft`` is imported when it is called.
"""

from __future__ import annotations

from typing import Any

from coa.kit.config import LoraSettings
from coa.kit.recipe import TrainError


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
