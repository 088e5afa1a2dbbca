"""Configuration of the convert stage: CoA variants, token counts, prompt style, RL prompt selection."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.config import StrictModel
from coa.format.prompts import PromptStyle


class ConvertConfig(StrictModel):
    """The convert stage."""

    name: str = Field(default="coa", description="Artifact name of the converted data.")
    variants: dict[str, str] = Field(
        default_factory=dict, description="Family → CoA variant override (default: by family and tools used)."
    )
    tokenizer: Literal["qwen2.5", "approx"] = Field(
        default="qwen2.5",
        description="Token counts: the real Qwen2.5 vocabulary (offline) or ~4 bytes/token.",
    )
    prompt_style: PromptStyle = Field(
        default="full",
        description="System prompt of the examples and RL prompts: the full rules, or one line (brief) for "
        "small students whose context is better spent on the trajectory; evaluation uses the same.",
    )
    min_pass_rate: float = Field(default=0.0, ge=0, le=1, description="Lowest teacher pass rate kept for RL.")
    max_pass_rate: float = Field(
        default=1.0, ge=0, le=1, description="Highest teacher pass rate kept for RL."
    )
    keep_unrun_prompts: bool = Field(
        default=False, description="Keep RL prompts of tasks the teacher never ran (no pass rate)."
    )
