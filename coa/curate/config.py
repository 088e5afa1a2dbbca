"""Configuration of the ``curate`` stage: filters, deduplication, decontamination and the gate.

Every knob has a documented default; a filter is switched off with ``False``/``None`` (see each
field). The stage reads raw ``trajectory.v1`` in batches of ``batch_rows`` and writes curated
``trajectory.v1`` plus ``quarantine.v1``, so these settings decide what a run loses and why.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from coa.config import StrictModel
from coa.llm.config import LLMConfig

DEFAULT_AGENTS = ("manager", "search_agent", "code_agent", "reflector", "verifier")


class FilterConfig(StrictModel):
    """Per-run filters; each rejected run is quarantined with the first failing reason."""

    require_correct: bool = Field(
        default=True, description="Reject runs whose final answer the family's scorer marks wrong."
    )
    keep_unscored: bool = Field(
        default=False,
        description="With require_correct: keep runs the scorer cannot judge (else reason 'unscored').",
    )
    require_clean_end: bool = Field(
        default=True,
        description="Reject runs that did not end cleanly: status other than 'completed' (error, step or "
        "time limit, budget), a run-level error, or no final answer (reason 'unclean_end:<why>').",
    )
    max_tool_errors: int | None = Field(
        default=3, ge=0, description="Most tool calls with an error a kept run may have; None = no limit."
    )
    token_measure: Literal["total", "completion"] = Field(
        default="total",
        description="What the token bounds measure: prompt + completion tokens, or completion tokens only.",
    )
    min_tokens: int | None = Field(default=None, ge=0, description="Fewest tokens per run; None = no bound.")
    max_tokens: int | None = Field(
        default=400_000, ge=0, description="Most tokens per run (reason 'too_long'); None = no bound."
    )
    min_tool_calls: int | None = Field(
        default=None,
        ge=0,
        description="Fewest tool calls per run (reason 'too_few_tool_calls'); None = none.",
    )
    max_tool_calls: int | None = Field(
        default=60, ge=0, description="Most tool calls per run (reason 'too_many_tool_calls'); None = none."
    )
    max_repeated_calls: int | None = Field(
        default=2,
        ge=1,
        description="Most times one identical (tool_name, tool_args) call, tool call or delegation, may "
        "occur in a run (reason 'repeated_tool_calls'); None = no limit.",
    )
    require_valid_coa: bool = Field(
        default=True,
        description="Reject runs the injected CoA check cannot convert to a valid trajectory of their "
        "variant (reason 'invalid_coa').",
    )


class DedupConfig(StrictModel):
    """Exact and near-duplicate removal across tasks, and a cap per task (first kept wins)."""

    exact: bool = Field(
        default=True,
        description="Drop a run whose normalized question and step content equal a kept run's, or whose "
        "normalized question equals a different kept task's (reason 'exact_duplicate').",
    )
    near: bool = Field(
        default=True,
        description="Drop a run whose question is a near duplicate of a different kept task's "
        "(MinHash LSH over word shingles; reason 'near_duplicate').",
    )
    near_threshold: float = Field(
        default=0.7,
        gt=0,
        le=1,
        description="Jaccard similarity of question shingles at or above which "
        "two tasks are near duplicates.",
    )
    num_perm: int = Field(default=128, ge=16, le=1024, description="MinHash permutations.")
    shingle_size: int = Field(default=3, ge=1, description="Words per question shingle.")
    verify: bool = Field(
        default=True,
        description="Confirm LSH candidates with the estimated Jaccard (keeps one uint32 signature per "
        "kept task); off = trust the LSH banding alone.",
    )
    max_per_task: int | None = Field(
        default=2, ge=1, description="Most runs kept per task_id (reason 'task_cap'); None = no cap."
    )


class DecontamConfig(StrictModel):
    """Decontamination against benchmark task sets (any ``task.v1`` artifact)."""

    benchmarks: tuple[str, ...] = Field(
        default=(),
        description="URIs of task.v1 artifacts to decontaminate against (e.g. imported GAIA, WebWalker, "
        "MATH500); empty = no decontamination.",
    )
    ngram_size: int = Field(default=8, ge=1, description="Words per n-gram for question overlap.")
    question_threshold: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of the shorter question's n-grams found in one benchmark question at or above "
        "which a run is contaminated (reason 'contaminated_question'). Questions shorter than "
        "ngram_size words match only when their normalized text is equal.",
    )
    answer_ngram_size: int = Field(
        default=3, ge=1, description="Words per n-gram for the partial question overlap of the answer rule."
    )
    answer_overlap_threshold: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="A run whose normalized gold answer equals a benchmark item's and whose question "
        "shares at least this share of answer_ngram_size-grams with that item's question is "
        "contaminated (reason 'contaminated_answer').",
    )
    scan_observations: bool = Field(
        default=True,
        description="Scan tool observations for benchmark answers (reason 'contaminated_observation').",
    )
    min_answer_chars: int = Field(
        default=4,
        ge=1,
        description="Benchmark answers shorter than this (normalized) are ignored by the observation scan, "
        "so short answers such as '17' do not flag every page that mentions them.",
    )
    observation_question_overlap: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="The observation scan flags an answer only when the same observation also holds at "
        "least this share of the benchmark question's answer_ngram_size-grams (a page that carries the "
        "benchmark item, not one that happens to contain a common answer such as 'research'); "
        "0 = the answer alone suffices.",
    )
    skip_own_answers: bool = Field(
        default=True,
        description="In the observation scan, ignore a benchmark answer equal to the run's own gold "
        "answer (finding its own answer is the point of a run; question overlap is checked apart).",
    )


class GateConfig(StrictModel):
    """The great-expectations gate over the curated output; a failed gate fails the flow."""

    enabled: bool = Field(default=True, description="Run the great-expectations suite and build Data Docs.")
    correctness_floor: float | None = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Least share of scored runs that are correct; None = not checked.",
    )
    correctness_scope: Literal["input", "curated"] = Field(
        default="input",
        description="Runs the correctness floor is measured on: every input run (the teacher's accuracy; "
        "with require_correct the curated rate is 1 by construction) or the curated runs.",
    )
    min_rows: int = Field(default=1, ge=0, description="Fewest curated runs.")
    min_steps: int = Field(default=1, ge=0, description="Fewest steps per curated run.")
    max_steps: int = Field(default=1000, ge=1, description="Most steps per curated run.")
    min_tool_calls: int = Field(default=0, ge=0, description="Fewest tool calls per curated run.")
    max_tool_calls: int = Field(default=200, ge=0, description="Most tool calls per curated run.")
    min_tokens: int = Field(default=0, ge=0, description="Fewest total tokens per curated run.")
    max_tokens: int = Field(default=2_000_000, ge=0, description="Most total tokens per curated run.")
    max_answer_chars: int = Field(default=10_000, ge=1, description="Longest final answer in characters.")
    max_observation_chars: int = Field(
        default=200_000, ge=1, description="Longest tool observation in characters."
    )
    allowed_agents: tuple[str, ...] = Field(
        default=DEFAULT_AGENTS, description="Agent tags a step may carry."
    )
    allowed_tools: tuple[str, ...] | None = Field(
        default=None,
        description="Tool tags a tool call or delegation may name; None = any.",
    )
    step_chunk_rows: int = Field(
        default=200_000,
        ge=1000,
        description="Curated steps validated per great-expectations run (bounds memory).",
    )
    run_chunk_rows: int = Field(
        default=100_000,
        ge=1000,
        description="Curated runs validated per great-expectations run (bounds memory); runs are "
        "split by a hash of the run id, so uniqueness within each part is uniqueness overall.",
    )


class CurateConfig(StrictModel):
    """The ``curate`` stage: raw trajectory.v1 -> curated trajectory.v1 + quarantine.v1 + report."""

    name: str = Field(default="curated", description="Artifact name of the curated trajectories.")
    batch_rows: int = Field(
        default=1000, ge=1, description="Runs read and processed per batch (memory is bounded by it)."
    )
    filters: FilterConfig = Field(default_factory=FilterConfig, description="Per-run filters.")
    dedup: DedupConfig = Field(default_factory=DedupConfig, description="Duplicate removal.")
    decontam: DecontamConfig = Field(default_factory=DecontamConfig, description="Benchmark decontamination.")
    gate: GateConfig = Field(default_factory=GateConfig, description="Data-quality gate and Data Docs.")
    drift_warn: float = Field(
        default=0.25,
        ge=0,
        description="Relative change of a headline metric versus the previous run that the report marks.",
    )
    judge: LLMConfig | None = Field(
        default=None,
        description="LLM judge endpoint for open-ended (web) answers that do not match exactly; "
        "null = token-F1 fallback.",
    )

    @model_validator(mode="after")
    def _ranges(self) -> CurateConfig:
        f, g = self.filters, self.gate
        for lo, hi, what in (
            (f.min_tokens, f.max_tokens, "filters.min_tokens/max_tokens"),
            (f.min_tool_calls, f.max_tool_calls, "filters.min_tool_calls/max_tool_calls"),
            (g.min_steps, g.max_steps, "gate.min_steps/max_steps"),
            (g.min_tool_calls, g.max_tool_calls, "gate.min_tool_calls/max_tool_calls"),
            (g.min_tokens, g.max_tokens, "gate.min_tokens/max_tokens"),
        ):
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"{what}: minimum {lo} is above maximum {hi}")
        return self
