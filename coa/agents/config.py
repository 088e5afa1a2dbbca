"""The teacher's config: its limits and schedule (:class:`TeacherConfig`) and the offline backend's
behaviour (:class:`OfflineConfig`). Config only: loading it loads no agent, backend or tool."""

from __future__ import annotations

from pydantic import Field

from coa.config import StrictModel


class TeacherConfig(StrictModel):
    """Limits and schedule of the multi-agent teacher."""

    name: str = Field(default="oagents-style", description="Teacher name recorded in every trajectory.")
    max_steps: int = Field(
        default=10, ge=1, description="Manager turns per task before giving up (status step_limit)."
    )
    max_agent_steps: int = Field(
        default=6, ge=1, description="Turns a search/code agent may take per delegation."
    )
    wall_time_s: float = Field(default=600.0, gt=0, description="Wall-clock limit per task (time_limit).")
    reflect_every: int = Field(
        default=2, ge=0, description="Reflect after every N manager turns (0 = never)."
    )
    replan_every: int = Field(
        default=0, ge=0, description="Re-plan every N manager turns (0 = only when needed)."
    )
    min_verification_score: int = Field(
        default=3, ge=1, le=4, description="Verification score needed to answer."
    )
    max_format_retries: int = Field(default=2, ge=0, description="Re-asks after a reply that does not parse.")
    history_chars: int = Field(
        default=6000, ge=500, description="Characters of history shown to reflector/verifier."
    )


class OfflineConfig(StrictModel):
    """How the rule-based teacher behaves."""

    slip_rate: float = Field(
        default=0.15, ge=0, le=1, description="Chance of a recoverable slip per decision."
    )
    verifier_miss_rate: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="Chance the verifier accepts a wrong answer (so curation sees some).",
    )
    seed: int = Field(default=0, description="Seed of the slips (mixed with the run id).")
    search_tool: str = Field(
        default="web_search", description="Tool the search agent uses: web_search/wiki_search."
    )
