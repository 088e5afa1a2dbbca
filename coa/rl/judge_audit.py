"""The audit of the LLM judge of web answers in RL rewards: it must agree with a labelled set first.

The judge is :class:`coa.scoring.judge.LLMJudge` (AFM's ``{rationale, judgement}`` JSON reply; its
verdicts are cached in the LLM layer's response cache, so a rerun replays them). Before a run trains
on its verdicts, :func:`audit_judge` scores it against a labelled audit set (JSON lines of
``{"id", "question", "prediction", "gold_answers", "label"}``, ``label`` true when the prediction is
correct): the agreement rate goes into the run's lineage, and a judge below
``judge_min_agreement`` stops the run (:class:`JudgeAuditFailed`) before any rollout is rewarded by it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coa.errors import CheckFailed, UserError
from coa.rl.config import RLError
from coa.scoring import AnswerJudge


class JudgeAuditFailed(RLError, CheckFailed):
    """The judge disagreed with the labelled audit set too often to reward a run."""


class JudgeAudit(BaseModel):
    """How the judge did on the audit set."""

    model_config = ConfigDict(frozen=True)

    audit_set: str = Field(description="The labelled audit set (path).")
    n: int = Field(description="Labelled examples judged.")
    agreement: float = Field(description="Share of examples where the judge's verdict equals the label.")
    disagreements: list[str] = Field(description="Ids of the examples judged against their label.")


def load_audit_set(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a labelled audit set (JSON lines); a row without a needed field is an error."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [k for k in ("id", "question", "prediction", "gold_answers", "label") if k not in row]
        if missing:
            raise UserError(f"{path}:{n}: audit row lacks {', '.join(missing)}")
        rows.append(row)
    if not rows:
        raise UserError(f"{path}: the judge audit set is empty")
    return rows


def audit_judge(judge: AnswerJudge, rows: Sequence[Mapping[str, Any]], audit_set: str) -> JudgeAudit:
    """Judge every labelled row; the agreement with the labels."""
    disagreements = []
    for row in rows:
        verdict = judge(str(row["prediction"]), list(row["gold_answers"]), question=str(row["question"]))
        correct = verdict if isinstance(verdict, bool) else verdict.correct
        if correct != bool(row["label"]):
            disagreements.append(str(row["id"]))
    return JudgeAudit(
        audit_set=audit_set,
        n=len(rows),
        agreement=1 - len(disagreements) / len(rows),
        disagreements=disagreements,
    )


def checked_judge(judge: AnswerJudge, audit_set: str, min_agreement: float) -> JudgeAudit:
    """Audit ``judge``; raise :class:`JudgeAuditFailed` below ``min_agreement``."""
    audit = audit_judge(judge, load_audit_set(audit_set), audit_set)
    if audit.agreement < min_agreement:
        raise JudgeAuditFailed(
            f"judge audit: {audit.agreement:.0%} agreement with the {audit.n} labelled answers of "
            f"{audit_set} (needs {min_agreement:.0%}; judged against their label: "
            f"{', '.join(audit.disagreements[:10])}); no rollout is rewarded by an unaudited judge"
        )
    return audit
