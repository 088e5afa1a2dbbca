"""Configuration of the student stage: the model the SFT stage starts from, and the tiny student's size
(:class:`TinyModelConfig`, built by :mod:`coa.model.tiny`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from coa.config import StrictModel
from coa.format.segments import TAGS

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS: tuple[str, ...] = (ENDOFTEXT, IM_START, IM_END)
TAG_TOKENS: tuple[str, ...] = tuple(f"<{t}>" for t in TAGS) + tuple(f"</{t}>" for t in TAGS)
"""Every CoA tag, open and close forms: one token each."""


class TinyModelConfig(StrictModel):
    """The tiny student: tokenizer and Qwen2 architecture (defaults: ~1.1 M parameters)."""

    vocab_size: int = Field(
        default=2048,
        ge=len(SPECIAL_TOKENS) + len(TAG_TOKENS) + 256,
        description="Target vocabulary size including special and tag tokens (BPE may learn fewer on a "
        "small corpus; the model's embedding matches the tokenizer actually built).",
    )
    min_frequency: int = Field(default=2, ge=1, description="Least count for a BPE merge to be learned.")
    hidden_size: int = Field(default=128, ge=8, description="Width of the residual stream.")
    num_layers: int = Field(default=4, ge=1, description="Number of decoder layers.")
    num_heads: int = Field(default=4, ge=1, description="Attention heads (hidden_size must divide by it).")
    num_kv_heads: int = Field(
        default=4, ge=1, description="Key/value heads (grouped-query attention; must divide num_heads)."
    )
    intermediate_size: int = Field(default=384, ge=1, description="Width of the SwiGLU MLP.")
    max_position_embeddings: int = Field(
        default=2048, ge=16, description="Longest sequence the model (and tokenizer) is declared for."
    )
    rope_theta: float = Field(default=10_000.0, gt=0, description="RoPE base frequency.")
    tie_word_embeddings: bool = Field(default=True, description="Share input embedding and LM head.")
    initializer_range: float = Field(default=0.02, gt=0, description="Std of the normal weight init.")
    seed: int = Field(default=0, description="Seed of the weight initialisation (and the pretraining order).")
    pretrain_steps: int = Field(
        default=0,
        ge=0,
        description="Steps of causal-LM pretraining on the tokenizer's texts (every token, observations "
        "included) before the model is saved; 0 leaves it random. A pretrained model has written every "
        "name of its corpus; a random one only what SFT targets.",
    )
    pretrain_block_size: int = Field(default=256, ge=16, description="Tokens per pretraining sequence.")
    pretrain_batch_size: int = Field(default=4, ge=1, description="Sequences per pretraining step.")
    pretrain_learning_rate: float = Field(default=2e-3, gt=0, description="Peak AdamW rate of pretraining.")

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}"
            )
        return self


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
