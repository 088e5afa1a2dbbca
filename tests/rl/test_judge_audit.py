"""The LLM judge in RL rewards: audited against a labelled set first; its cached verdicts replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coa.rl.config import RLStageConfig
from coa.rl.judge_audit import JudgeAuditFailed, audit_judge, checked_judge, load_audit_set
from coa.rl.rewards import score_episodes
from coa.scoring.judge import LLMJudge
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.llm.helpers import judge_config

from .helpers import math_prompt
from .test_rewards import answer_text, episode

CORRECT = Reply(body=completion(json.dumps({"rationale": "same person", "judgement": "correct"})))
INCORRECT = Reply(body=completion(json.dumps({"rationale": "another person", "judgement": "incorrect"})))


def audit_file(tmp_path: Path) -> str:
    rows = [
        {"id": "a1", "question": "Who found X-rays?", "prediction": "W. C. Roentgen",
         "gold_answers": ["Wilhelm Conrad Röntgen"], "label": True},
        {"id": "a2", "question": "Who found radium?", "prediction": "Albert Einstein",
         "gold_answers": ["Marie Curie"], "label": False},
    ]  # fmt: skip
    path = tmp_path / "audit.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_the_audit_reports_agreement_and_stops_a_judge_below_the_floor(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.reset()
    server.push(CORRECT, INCORRECT)
    path = audit_file(tmp_path)
    judge = LLMJudge(judge_config(server, tmp_path / "cache"))
    try:
        audit = audit_judge(judge, load_audit_set(path), path)
    finally:
        judge.close()
    assert (audit.n, audit.agreement, audit.disagreements) == (2, 1.0, [])
    server.reset()
    server.push(CORRECT, CORRECT)  # calls "Albert Einstein" right: a judge that agrees 50%
    lenient = LLMJudge(judge_config(server, tmp_path / "other-cache"))
    try:
        with pytest.raises(JudgeAuditFailed, match=r"50% agreement .*needs 80%.*a2"):
            checked_judge(lenient, path, 0.8)
    finally:
        lenient.close()


def test_web_rewards_come_from_the_judge_and_its_cached_verdicts_replay(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    server.reset()
    server.push(CORRECT)
    web = math_prompt(0, 1, 2) | {
        "family": "web",
        "variant": "web",
        "gold_answers": ["Wilhelm Conrad Röntgen"],
    }
    params = RLStageConfig()
    first = LLMJudge(judge_config(server, tmp_path / "cache"))
    try:
        [r] = score_episodes([episode()], [web], [answer_text("W. C. Roentgen")], params, first)
    finally:
        first.close()
    assert r.is_correct and r.correct == 1.0 and server.hits == 1
    again = LLMJudge(judge_config(server, tmp_path / "cache"))  # a rerun over the same cache
    try:
        [r2] = score_episodes([episode()], [web], [answer_text("W. C. Roentgen")], params, again)
    finally:
        again.close()
    assert r2.is_correct and server.hits == 1  # replayed, no request
    [no_judge] = score_episodes([episode()], [web], [answer_text("W. C. Roentgen")], params)
    assert not no_judge.is_correct  # token F1 fallback: not the same words


def test_a_judge_needs_an_audit_set(tmp_path: Path, server: FakeLLMServer) -> None:
    with pytest.raises(ValueError, match="needs a judge_audit_set"):
        RLStageConfig(judge=judge_config(server, tmp_path))
