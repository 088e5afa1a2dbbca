"""Configuration of the student stage: the model the SFT stage starts from."""

from __future__ import annotations

from pydantic import Field

from coa.config import StrictModel
from coa.model.tiny import TinyModelConfig


class StudentConfig(StrictModel):
    """The model the SFT stage starts from."""

    name: str = Field(default="student", description="Artifact name of a built tiny model.")
    base: str | None = Field(
        default=None,
        description="A Hugging Face model folder or hub id to fine-tune (e.g. Qwen/Qwen2.5-7B-Instruct on "
        "a GPU worker); null = build the tiny student on the SFT data (`coa model init`).",
    )
    tiny: TinyModelConfig = Field(
        default_factory=TinyModelConfig, description="Size of the tiny student built when base is null."
    )
