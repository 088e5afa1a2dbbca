"""A night's promotion, Prefect-free: the gate's verdict applied to the registry, the night on the
ledger, its row in the nightly history.

:class:`Promoter` holds the three stores of one nightly configuration (the
:class:`~coa.registry.store.Registry`, the :class:`~coa.registry.ledger.Ledger` of its nights, the
:class:`~coa.registry.history.NightlyHistory` of its model name). The nightly plan's run
(:mod:`coa.plan.nightly`) calls it with URIs, the verdict and the night's summaries: it knows no
plan, no step and no orchestrator, so a flow, a test or a script promotes the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from coa.registry.gate import Verdict, apply
from coa.registry.history import NightlyHistory, NightRow, NightSummaries, night_row, stopped_row
from coa.registry.ledger import Ledger, Night
from coa.registry.store import Registry
from coa.settings import Settings

PROMOTED, REFUSED = "promoted", "refused: the champion stays"


@dataclasses.dataclass(frozen=True)
class Promotion:
    """What the gate's verdict did to the registry tonight."""

    night: str
    verdict: Verdict
    candidate: str
    """The candidate model's URI."""
    champion: str | None
    """The champion's model URI after the verdict (None: still none)."""
    history: tuple[NightRow, ...]
    """Every night's row of the model name, tonight's included."""

    @property
    def outcome(self) -> str:
        return PROMOTED if self.verdict.promote else REFUSED


class Promoter:
    """The registry, the ledger of nights and the nightly history of one nightly configuration
    (``run_name``) and the model name its candidates compete for (``model_name``)."""

    def __init__(self, run_name: str, model_name: str, settings: Settings | None = None) -> None:
        self.model_name = model_name
        self.registry = Registry(settings=settings)
        self.settings = self.registry.settings
        self.ledger = Ledger(run_name, settings=settings)
        self.history = NightlyHistory(model_name, settings=settings)

    def champion(self) -> str | None:
        """The champion's model URI (None before the first promotion)."""
        champion = self.registry.champion(self.model_name)
        return champion.model_uri if champion else None

    def earlier(self, night: str, limit: int | None = None) -> list[Night]:
        """The nights before ``night`` whose data is curated with tonight's (at most ``limit``)."""
        return self.ledger.before(night, limit)

    def committed(self, night: str, collected: str, tasks: str) -> Night:
        """Tonight's collection (``collected``) and its tasks are committed: on the ledger, later nights
        build on them whatever follows (a rerun of the night keeps its first record)."""
        return self.ledger.record(night, collected, tasks)

    def stopped(self, night: str, new_tasks: Mapping[str, Any]) -> tuple[NightRow, ...]:
        """A night that stopped with no new task: its history row (the champion stays); every row."""
        return tuple(self.history.record(stopped_row(night, new_tasks, self.history.rows())))

    def promote(
        self,
        night: str,
        candidate: str,
        verdict: Verdict,
        evaluations: Mapping[str, str],
        gated_against: str | None,
        summaries: NightSummaries,
    ) -> Promotion:
        """Apply the gate's ``verdict`` on ``candidate`` (its and the champion's ``evaluations``, by
        role) to the registry: promote on a pass, else record the refused candidate with its reasons;
        ``gated_against``: the champion it was gated against (a promotion is refused when another run
        moved the champion meanwhile: never two champions). Then the night's history row."""
        apply(self.registry, self.model_name, candidate, verdict, evaluations, if_champion=gated_against)
        rows = self.history.record(night_row(night, summaries, verdict))
        return Promotion(night, verdict, candidate, self.champion(), tuple(rows))
