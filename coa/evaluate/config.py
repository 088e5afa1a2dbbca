"""Configuration of an evaluation run (light to import: no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from coa.config import StrictModel
from coa.format.prompts import PromptStyle
from coa.llm.config import EndpointConfig
from coa.tools.config import ToolsConfig


class EvalConfig(StrictModel):
    """How a CoA model is run on evaluation tasks, and when a run stops."""

    name: str = Field(default="eval", description="Artifact name of the evaluation.")
    backend: Literal["hf", "endpoint"] = Field(
        default="hf",
        description="hf = transformers generate in this process (CPU or GPU); endpoint = an "
        "OpenAI-compatible completions server (vLLM) given in `endpoint`.",
    )
    endpoint: EndpointConfig | None = Field(
        default=None, description="The completions server for backend=endpoint (its `model` is sent)."
    )
    max_turns: int = Field(default=8, ge=1, description="Model generations per task (one per tool call + 1).")
    max_new_tokens: int = Field(default=256, ge=1, description="Tokens one generation may produce.")
    max_total_tokens: int = Field(
        default=1536, ge=1, description="Generated tokens per task over all turns (observations not counted)."
    )
    batch_size: int = Field(
        default=32, ge=1, description="hf: most generations batched into one `generate` call."
    )
    concurrency: int = Field(
        default=128,
        ge=1,
        description="Episodes in flight at once, each advancing on its own (hf: their generations are "
        "micro-batched up to batch_size; endpoint: requests in flight, the connection pool size).",
    )
    samples: int = Field(
        default=1, ge=1, description="Episodes per task (sample_index 0..samples-1); 1 = one greedy run."
    )
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature when samples > 1.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass when samples > 1.")
    prompt_style: PromptStyle = Field(
        default="full",
        description="System prompt style; must match the convert stage the model was trained on.",
    )
    variants: dict[str, str] = Field(
        default_factory=dict, description="Family → CoA variant override (as in the convert stage)."
    )
    families: tuple[str, ...] | None = Field(
        default=None, description="Evaluate only these families; null = all."
    )
    limit_per_family: int | None = Field(default=None, ge=1, description="First N tasks of each family only.")
    tools: ToolsConfig | None = Field(
        default=None, description="The tools the model calls; null = the collect section's tools."
    )

    @model_validator(mode="after")
    def _endpoint_given(self) -> EvalConfig:
        if self.backend == "endpoint" and self.endpoint is None:
            raise ValueError("backend=endpoint needs an `endpoint` (base_url or base_url_env, model)")
        return self
