"""Configuration of an evaluation run (light to import: no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from coa.config import StrictModel
from coa.format.prompts import PromptStyle
from coa.llm.config import EndpointConfig, LLMConfig
from coa.rollout.config import RolloutLimits
from coa.tools.config import ToolsConfig

DEFAULT_BLOCKED_HOSTS: tuple[str, ...] = (
    "huggingface.co/datasets",
    "hf.co/datasets",
    "huggingface.co/gaia-benchmark",
    "huggingface.co/spaces/gaia-benchmark",
    "github.com/openai/simple-evals",
    "github.com/centerforaisafety/hle",
    "lastexam.ai",
    "github.com/livecodebench",
    "livecodebench.github.io",
    "github.com/alibaba-nlp/webagent",
    "github.com/hendrycks/math",
    "github.com/openbmb/olympiadbench",
    "github.com/oppo-personalai/agent_foundation_models",
    "artofproblemsolving.com/wiki",
    "kaggle.com/datasets",
    "paperswithcode.com/dataset",
)
"""Where benchmark questions and answers are hosted: dataset hubs, the benchmarks' repositories and
answer wikis. ``host/path-prefix``, case-insensitive; a host matches its subdomains too."""


class TokenPrice(StrictModel):
    """What a model's tokens cost, for cost-of-pass."""

    input_per_mtok: float = Field(ge=0, description="Dollars per million prompt tokens.")
    output_per_mtok: float = Field(ge=0, description="Dollars per million generated tokens.")

    def dollars(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1e6


class BenchmarkSpec(StrictModel):
    """One benchmark to evaluate on: an imported ``task.v1`` artifact and how much of it."""

    uri: str = Field(description="The task artifact (from `coa tasks import`).")
    table: str = Field(default="tasks", description="Its table.")
    limit: int | None = Field(default=None, ge=1, description="First N tasks of each benchmark only.")
    samples: int | None = Field(
        default=None, ge=1, description="Episodes per task here; null = the evaluation's `samples`."
    )


class LeakGuardConfig(StrictModel):
    """Evaluation-time protection against reading a benchmark's answers on the web."""

    blocked_hosts: tuple[str, ...] = Field(
        default=DEFAULT_BLOCKED_HOSTS,
        description="Search hits and crawled pages at these `host/path-prefix` locations are dropped "
        "(a host matches its subdomains); empty = no blocking.",
    )
    flag_gold: bool = Field(
        default=True,
        description="Flag a run (eval.v1 `gold_in_observation`) whose search or crawl observation "
        "contains the task's gold answer.",
    )


class EvalConfig(RolloutLimits):
    """How a CoA model is run on evaluation tasks; when an episode stops is :class:`RolloutLimits`
    (``max_turns``, ``max_new_tokens``, ``max_total_tokens``, ``duplicate_calls``,
    ``max_context_tokens``), declared once for evaluation and RL."""

    name: str = Field(default="eval", description="Artifact name of the evaluation.")
    backend: Literal["hf", "endpoint"] = Field(
        default="hf",
        description="hf = transformers generate in this process (CPU or GPU); endpoint = an "
        "OpenAI-compatible completions server (vLLM) given in `endpoint`.",
    )
    endpoint: EndpointConfig | None = Field(
        default=None, description="The completions server for backend=endpoint (its `model` is sent)."
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
    prompt_style: PromptStyle | None = Field(
        default=None,
        description="System prompt style; null = the style of the conversion the model was trained on, "
        "read from the model's lineage (a model with none, e.g. a hub base: full). Set: this style for "
        "any model (an override).",
    )
    variants: dict[str, str] | None = Field(
        default=None,
        description="Family → CoA variant override; null = the model's conversion's (`convert.variants`, "
        "from its lineage; none: each family's own variant).",
    )
    families: tuple[str, ...] | None = Field(
        default=None, description="Evaluate only these families; null = all."
    )
    limit_per_family: int | None = Field(default=None, ge=1, description="First N tasks of each family only.")
    limit_per_benchmark: int | None = Field(
        default=None, ge=1, description="First N tasks of each benchmark (task.v1 source) only."
    )
    benchmarks: tuple[BenchmarkSpec, ...] = Field(
        default=(),
        description="Benchmark task artifacts to evaluate on (each with its own limit and samples); "
        "empty = the stage's task input.",
    )
    prices: dict[str, TokenPrice] = Field(
        default_factory=dict,
        description="Model name (eval.v1 `model`) → token prices; a priced model gets cost-of-pass.",
    )
    leak_guard: LeakGuardConfig = Field(
        default_factory=LeakGuardConfig, description="Blocked benchmark hosts and the gold-answer flag."
    )
    judge: LLMConfig | None = Field(
        default=None,
        description="LLM judge endpoint for open web answers that do not match exactly (verdicts cached "
        "in the LLM response cache under the store); null = token-F1 fallback.",
    )
    tools: ToolsConfig | None = Field(
        default=None, description="The tools the model calls; null = the collect section's tools."
    )
    scorers: dict[str, str] = Field(
        default_factory=dict,
        description="Benchmark (task.v1 source) → scorer name (coa.scoring.benchmarks.SCORERS), overriding "
        "the scorer chosen by the benchmark; empty = each benchmark's own rule.",
    )
    tool_record: Literal["off", "record", "replay", "auto"] | None = Field(
        default=None,
        description="Observation store mode for this evaluation, over the tools' `record`: replay = only "
        "recorded observations, a missing one fails the run (a reproducible web evaluation); record = call "
        "live and record; auto = recorded when present, else live; off = live, nothing recorded; null = the "
        "tools' setting.",
    )
    recording: str | None = Field(
        default=None,
        description="Where recorded tool observations are read and written: a folder or URI holding "
        "`observations/` (e.g. the store root of the run that recorded them); null = this store's root.",
    )

    @model_validator(mode="after")
    def _endpoint_given(self) -> EvalConfig:
        if self.backend == "endpoint" and self.endpoint is None:
            raise ValueError("backend=endpoint needs an `endpoint` (base_url or base_url_env, model)")
        return self


class EvalReportConfig(StrictModel):
    """The evaluation report's step (``coa eval-report``): how its deltas against a baseline are
    computed."""

    bootstrap_samples: int = Field(
        default=2000,
        ge=1,
        description="Paired bootstrap resamples of each benchmark's delta against the baseline (its "
        "95% interval).",
    )


class ReportConfig(StrictModel):
    """The training report's step: which pipeline run it reports."""

    run_name: str = Field(description="The run reported (the report's artifact name).")
