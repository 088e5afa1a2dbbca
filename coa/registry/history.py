"""The nightly history of a model name: one row per night, read side by side.

:func:`night_row` reads a night's own step summaries (:class:`NightSummaries`: tonight's new tasks,
the collection, the curation, SFT, RL) and the gate's verdict (the candidate's and the champion's
value of the gate's primary metric on its primary benchmark, each with the gate's bootstrap
interval, and their paired delta) into a :class:`NightRow`; a night that stopped at "no new tasks"
gets a row saying so (:func:`stopped_row`: the champion carried over); :class:`NightlyHistory` keeps
one JSON file per night under ``{root}/nightly-history/{model name}/{night}.json`` (a rerun of a
night writes the same row again); :func:`plot` draws the champion's primary metric over the nights
with its interval, beside each night's candidate. The nightly flow publishes the rows and the plot;
``coa models history NAME`` prints the rows.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coa import io
from coa.registry.gate import Estimate, Verdict
from coa.registry.ledger import read_records
from coa.settings import Settings

HISTORY_DIR = "nightly-history"
NO_NEW_TASKS = "no new tasks"
"""Why a night stopped before training (:attr:`NightRow.stopped`)."""


class NightRow(BaseModel):
    """One night: what it collected and kept, what it trained, how the models scored on the gate's
    primary metric (with the gate's bootstrap intervals), the verdict; or where it stopped."""

    model_config = ConfigDict(frozen=True)
    night: str
    tasks_new: int | None = Field(description="Tasks no earlier night had collected.")
    runs_collected: int | None = Field(description="Teacher runs collected tonight.")
    runs_kept: int | None = Field(description="Runs kept by curation (tonight's and earlier nights').")
    teacher_tokens: int | None = Field(description="Prompt + completion tokens of tonight's teacher runs.")
    teacher_cost_usd: float | None = Field(description="Their cost; None without prices.")
    sft_steps: int | None = Field(description="SFT optimizer steps run.")
    rl_steps: int | None = Field(description="RL optimizer steps run; None without RL.")
    metric: str | None = Field(
        default=None, description="The gate's primary metric on its primary benchmark (``correct on all``)."
    )
    confidence: float | None = Field(default=None, description="The confidence of the intervals below.")
    candidate: float | None = Field(description="The candidate's value of the metric.")
    candidate_low: float | None = Field(default=None, description="Its bootstrap interval's lower bound.")
    candidate_high: float | None = Field(default=None, description="Its bootstrap interval's upper bound.")
    champion: float | None = Field(description="The champion's value after tonight's verdict.")
    champion_low: float | None = Field(default=None, description="Its bootstrap interval's lower bound.")
    champion_high: float | None = Field(default=None, description="Its bootstrap interval's upper bound.")
    delta: float | None = Field(default=None, description="candidate - champion on their paired rows.")
    delta_low: float | None = Field(default=None, description="The paired bootstrap interval's lower bound.")
    delta_high: float | None = Field(default=None, description="Its upper bound.")
    promoted: bool = Field(description="Whether the gate promoted the candidate.")
    reason: str = Field(description="The gate's reasons, joined (or why the night stopped).")
    stopped: str | None = Field(
        default=None, description="Why the night stopped before the gate (``no new tasks``); None: it ran."
    )


@dataclasses.dataclass(frozen=True)
class NightSummaries:
    """The summaries of a night's steps a history row reads (empty: the step did not run)."""

    new_tasks: Mapping[str, Any]
    collect: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    curate: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    sft: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rl: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _estimate(value: Estimate | None) -> tuple[float | None, float | None, float | None]:
    return (None, None, None) if value is None else (value.value, value.low, value.high)


def night_row(night: str, summaries: NightSummaries, verdict: Verdict) -> NightRow:
    """The row of ``night`` from its steps' summaries and the gate's verdict (its primary metric and
    intervals: :class:`~coa.registry.gate.PrimaryMetric`)."""
    collect, curate = summaries.collect, summaries.curate
    tokens = None
    if "prompt_tokens" in collect:
        tokens = int(collect["prompt_tokens"]) + int(collect["completion_tokens"])
    primary = verdict.primary
    candidate = _estimate(primary.candidate if primary else None)
    champion = candidate if verdict.promote else _estimate(primary.champion if primary else None)
    delta = primary.delta if primary else None
    return NightRow(
        night=night, tasks_new=summaries.new_tasks.get("new"), runs_collected=collect.get("runs"),
        runs_kept=curate.get("rows_kept"), teacher_tokens=tokens, teacher_cost_usd=collect.get("cost_usd"),
        sft_steps=summaries.sft.get("steps_run"), rl_steps=summaries.rl.get("steps_run"),
        metric=f"{primary.metric} on {primary.benchmark}" if primary else None,
        confidence=primary.confidence if primary else None,
        candidate=candidate[0], candidate_low=candidate[1], candidate_high=candidate[2],
        champion=champion[0], champion_low=champion[1], champion_high=champion[2],
        delta=delta.delta if delta else None, delta_low=delta.low if delta else None,
        delta_high=delta.high if delta else None,
        promoted=verdict.promote, reason="; ".join(verdict.reasons),
    )  # fmt: skip


def stopped_row(night: str, new_tasks: Mapping[str, Any], earlier: Sequence[NightRow]) -> NightRow:
    """The row of a night that stopped at its new tasks (``new_tasks``: that step's summary) with none
    new: nothing collected or trained, the champion (the last earlier night's, if any) stays."""
    last = next((r for r in reversed(earlier) if r.night < night and r.champion is not None), None)
    return NightRow(
        night=night, tasks_new=new_tasks.get("new", 0), runs_collected=0, runs_kept=None,
        teacher_tokens=0, teacher_cost_usd=None, sft_steps=None, rl_steps=None,
        metric=last.metric if last else None, confidence=last.confidence if last else None,
        candidate=None, champion=last.champion if last else None,
        champion_low=last.champion_low if last else None, champion_high=last.champion_high if last else None,
        promoted=False, reason="no new tasks tonight: nothing collected or trained; the champion stays",
        stopped=NO_NEW_TASKS,
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
    """The champion's primary metric over the nights (its bootstrap interval) beside each candidate, as base64
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
    champ = [(r.night, r.champion, r.champion_low, r.champion_high) for r in scored if r.champion is not None]
    if champ:
        below = [v - (lo if lo is not None else v) for _, v, lo, _ in champ]
        above = [(hi if hi is not None else v) - v for _, v, _, hi in champ]
        ax.errorbar([c[0] for c in champ], [c[1] for c in champ], yerr=[below, above],
                    marker="o", capsize=3, label=f"champion of {name}")  # fmt: skip
    cand = [(r.night, r.candidate) for r in scored if r.candidate is not None]
    ax.scatter([c[0] for c in cand], [c[1] for c in cand], marker="x", color="tab:red", label="candidate")
    metric = next((r.metric for r in reversed(scored) if r.metric), "the gate's primary metric")
    level = next((r.confidence for r in reversed(scored) if r.confidence), None)
    ax.set_ylabel(metric + (f" ({level:.0%} interval)" if level else ""), fontsize=8)
    ax.set_xticks(range(len(nights)), nights, rotation=30, ha="right")
    ax.legend(fontsize=8)
    return png(fig)
