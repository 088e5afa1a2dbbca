"""The nightly history of a model name: one row per night, read side by side.

:func:`night_row` reads a night's own step summaries (tonight's new tasks, the collection, the
curation, SFT, RL, the candidate's and the champion's evaluations) and the gate's verdict into a
:class:`NightRow`; :class:`NightlyHistory` keeps one JSON file per night under
``{root}/nightly-history/{model name}/{night}.json`` (a rerun of a night writes the same row again);
:func:`plot` draws the champion's primary metric over the nights with its 95% interval, beside each
night's candidate. The nightly flow publishes the rows and the plot; ``coa models history NAME``
prints the rows.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coa import io
from coa.registry.ledger import read_records
from coa.settings import Settings

HISTORY_DIR = "nightly-history"
PRIMARY = "pass@1"
"""The metric the history shows per night: over all held-out tasks (``metrics["all"]``)."""


class NightRow(BaseModel):
    """One night: what it collected and kept, what it trained, how the models scored, the verdict."""

    model_config = ConfigDict(frozen=True)
    night: str
    tasks_new: int | None = Field(description="Tasks no earlier night had collected.")
    runs_collected: int | None = Field(description="Teacher runs collected tonight.")
    runs_kept: int | None = Field(description="Runs kept by curation (tonight's and earlier nights').")
    teacher_tokens: int | None = Field(description="Prompt + completion tokens of tonight's teacher runs.")
    teacher_cost_usd: float | None = Field(description="Their cost; None without prices.")
    sft_steps: int | None = Field(description="SFT optimizer steps run.")
    rl_steps: int | None = Field(description="RL optimizer steps run; None without RL.")
    candidate: float | None = Field(description=f"The candidate's {PRIMARY} on the held-out tasks.")
    candidate_se: float | None = Field(description="Its standard error.")
    champion: float | None = Field(description=f"The champion's {PRIMARY} after tonight's verdict.")
    champion_se: float | None = Field(description="Its standard error.")
    promoted: bool = Field(description="Whether the gate promoted the candidate.")
    reason: str = Field(description="The gate's reasons, joined.")


def _metric(summary: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    if not summary:
        return None, None
    overall = summary.get("metrics", {}).get("all", {})
    return overall.get(PRIMARY), overall.get(f"{PRIMARY}_se")


def night_row(
    night: str,
    summaries: Mapping[str, Mapping[str, Any]],
    promoted: bool,
    reasons: Sequence[str],
    candidate_eval: str,
    champion_eval: str,
    new_tasks: str,
) -> NightRow:
    """The row of ``night`` from its steps' summaries (step name -> summary) and the gate's verdict;
    the step names of the candidate's and champion's evaluations and of tonight's new tasks are the
    plan's."""
    collect, curate = summaries.get("collect", {}), summaries.get("curate", {})
    tokens = None
    if "prompt_tokens" in collect:
        tokens = int(collect["prompt_tokens"]) + int(collect["completion_tokens"])
    candidate, candidate_se = _metric(summaries.get(candidate_eval))
    champion, champion_se = (candidate, candidate_se) if promoted else _metric(summaries.get(champion_eval))
    return NightRow(
        night=night, tasks_new=summaries.get(new_tasks, {}).get("new"), runs_collected=collect.get("runs"),
        runs_kept=curate.get("rows_kept"), teacher_tokens=tokens, teacher_cost_usd=collect.get("cost_usd"),
        sft_steps=summaries.get("sft", {}).get("steps_run"),
        rl_steps=summaries.get("rl", {}).get("steps_run"),
        candidate=candidate, candidate_se=candidate_se, champion=champion, champion_se=champion_se,
        promoted=promoted, reason="; ".join(reasons),
    )  # fmt: skip


class NightlyHistory:
    """The nights of one model name, one JSON file each, in night order."""

    def __init__(self, name: str, root: str | None = None, settings: Settings | None = None) -> None:
        store = io.Store(root, settings)
        self.fs, self.path = io.filesystem(io.join(store.root, HISTORY_DIR, name), store.settings)

    def rows(self) -> list[NightRow]:
        return read_records(self.fs, self.path, NightRow)

    def record(self, row: NightRow) -> list[NightRow]:
        """Write ``row`` (a rerun of its night writes it again); every night's row, in order."""
        path = posixpath.join(self.path, f"{row.night}.json")
        io.write_atomic(self.fs, path, row.model_dump_json(indent=2).encode())
        return self.rows()


def plot(rows: Sequence[NightRow], name: str) -> str | None:
    """The champion's primary metric over the nights (95% interval) beside each candidate, as base64
    PNG (:func:`coa.pages.png`); None when no night has a metric."""
    scored = [r for r in rows if r.champion is not None or r.candidate is not None]
    if not scored:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from coa.pages import png

    fig, ax = plt.subplots(figsize=(6, 3))
    nights = [r.night for r in scored]
    champ = [(r.night, r.champion, r.champion_se or 0.0) for r in scored if r.champion is not None]
    if champ:
        ax.errorbar([c[0] for c in champ], [c[1] for c in champ], yerr=[1.96 * c[2] for c in champ],
                    marker="o", capsize=3, label=f"champion of {name}")  # fmt: skip
    cand = [(r.night, r.candidate) for r in scored if r.candidate is not None]
    ax.scatter([c[0] for c in cand], [c[1] for c in cand], marker="x", color="tab:red", label="candidate")
    ax.set_ylabel(f"{PRIMARY} (held-out)")
    ax.set_xticks(range(len(nights)), nights, rotation=30, ha="right")
    ax.legend(fontsize=8)
    return png(fig)
