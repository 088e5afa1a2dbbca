"""The LLM judge against a fake OpenAI-compatible server: verdicts, fences, retries, cache, audit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from coa.llm import EndpointConfig, LLMConfig
from coa.scoring import score_answer
from coa.scoring.judge import LLMJudge, judge_prompt, parse_verdict
from tests.llm.fake_server import FakeLLMServer, Reply, completion


@pytest.fixture
def judge(server: FakeLLMServer, tmp_path: Path) -> Iterator[LLMJudge]:
    server.reset()
    endpoint = EndpointConfig(
        name="judge",
        base_url=server.url,
        model="judge-model",
        max_retries=1,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
        timeout_s=5,
    )
    j = LLMJudge(LLMConfig(endpoints=(endpoint,), cache_root=str(tmp_path / "cache")))
    yield j
    j.close()


def verdict(judgement: str, fence: bool = False) -> Reply:
    body = json.dumps({"rationale": "same city, different spelling", "judgement": judgement})
    return Reply(body=completion(f"```json\n{body}\n```" if fence else body))


def test_parse_verdict() -> None:
    assert parse_verdict('{"rationale": "r", "judgement": "correct"}') == (True, "r")
    assert parse_verdict('```json\n{"rationale": "r", "judgement": "Incorrect"}\n```') == (False, "r")
    assert parse_verdict("correct") is None and parse_verdict('{"judgement": "maybe"}') is None


def test_verdicts_are_audited_and_cached(judge: LLMJudge, server: FakeLLMServer) -> None:
    server.push(verdict("correct", fence=True))
    score = judge("N.Y.C.", ["New York City"], question="Where is the Met?")
    assert score.correct and score.method == "web:judge"
    assert "judge-model/" + judge_prompt()["version"] in score.detail and "same city" in score.detail
    request = server.requests[-1].body
    assert "New York City" in request["messages"][1]["content"] and request["temperature"] == 0.0
    again = judge("N.Y.C.", ["New York City"], question="Where is the Met?")
    assert again.correct and "(cached)" in again.detail and server.hits == 1


def test_unreadable_replies_are_retried_then_scored_incorrect(judge: LLMJudge, server: FakeLLMServer) -> None:
    server.push(Reply(body=completion("I think it is right")), verdict("incorrect"))
    score = judge("Boston", ["New York City"], question="Where is the Met?")
    assert not score.correct and score.method == "web:judge" and server.hits == 2
    server.reset()
    server.default = Reply(body=completion("no json here"))
    failed = judge("Paris", ["Rome"], question="Capital of Italy?")
    assert failed.method == "web:judge_unreadable" and not failed.correct and server.hits == 3


def test_score_answer_uses_the_judge_only_when_not_exact(judge: LLMJudge, server: FakeLLMServer) -> None:
    exact = score_answer("New York City", ["New York City"], "web", judge=judge, question="q")
    assert exact.correct and exact.method == "web:em" and server.hits == 0
    server.push(verdict("correct"))
    judged = score_answer("NYC", ["New York City"], "web", judge=judge, question="q")
    assert judged.correct and judged.method == "web:judge" and server.hits == 1


def test_benchmark_graders_run_on_the_judge_endpoint(judge: LLMJudge, server: FakeLLMServer) -> None:
    from coa.scoring.benchmarks import score_task

    task = {"task_id": "browsecomp:0", "source": "browsecomp", "family": "web", "question": "When?",
            "gold_answers": ["1988-96"], "metadata": '{"topic": "Art"}'}  # fmt: skip
    server.push(
        Reply(
            body=completion("extracted_final_answer: 1988-96\nreasoning: same\ncorrect: yes\nconfidence: 90")
        )
    )
    verdict = score_task(task, "From 1988 to 1996.", judge=judge)
    assert verdict.correct and verdict.scorer.name == "simple-evals-browsecomp"
    assert "judge-model/simple-evals browsecomp: yes" in verdict.detail
    sent = server.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["user"]  # simple-evals' grader: no system message
    assert "[correct_answer]: 1988-96" in sent[0]["content"] and "From 1988 to 1996." in sent[0]["content"]
    server.reset()
    server.default = Reply(
        body=completion("**extracted_final_answer:** 1990\n**reasoning:** differs\n**correct:** yes")
    )
    hle = score_task(dict(task, source="hle_test", task_id="hle_test:0"), "1990", judge=judge)
    # simple-evals' parser wants "correct: yes" as written: markdown in between reads as no
    assert not hle.correct and hle.scorer.name == "hle-browsecomp-template" and ": no;" in hle.detail
    assert server.hits == 1  # no retry, as simple-evals


def test_a_cached_verdict_gives_the_same_row_detail(judge: LLMJudge, server: FakeLLMServer) -> None:
    from coa.scoring.benchmarks import score_task

    task = {"task_id": "webwalker_main:0", "source": "webwalker_main", "family": "web", "question": "Who?",
            "gold_answers": ["EU4Health"], "metadata": "{}"}  # fmt: skip
    server.push(verdict("correct"))
    first = score_task(task, "the EU4Health programme", judge=judge)
    again = score_task(task, "the EU4Health programme", judge=judge)
    assert first.correct and first.scorer.name == "coa-web" and server.hits == 1
    assert first.detail == again.detail and "cached" not in again.detail


def test_coa_score_on_an_afm_browsecomp_round_file_grades_with_simple_evals(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    """AFM's web-agent round file and AFM's BrowseComp file, graded by simple-evals' grader through a
    judge endpoint; the output names the scorer and its package beside the number."""
    from typer.testing import CliRunner

    from coa.cli import app

    repo = Path(__file__).resolve().parents[2]
    server.reset()
    questions = [
        {"question": f"Which year, clue {i}?", "answer": str(1990 + i), "topic": "Art"} for i in range(4)
    ]
    tasks = tmp_path / "browsecomp.json"
    tasks.write_text(json.dumps(questions))
    with (tmp_path / "browsecomp.round_0.jsonl").open("w") as fh:
        for i, q in enumerate(questions):
            row = {"question_id": i, "question": q["question"], "Level": 1, "golden_answer": q["answer"],
                   "prediction": q["answer"] if i < 3 else "no idea", "llm_judge": 0, "steps": [],
                   "status": "ok", "error": None, "raw": ""}  # fmt: skip
            fh.write(json.dumps(row) + "\n")
    profile = tmp_path / "judge.yaml"
    endpoint = {"base_url": server.url, "model": "judge-model", "max_retries": 1,
                "backoff_base_s": 0.01, "backoff_max_s": 0.02, "timeout_s": 5}  # fmt: skip
    judge = {"cache_root": str(tmp_path / "cache"), "endpoints": ["judge"]}  # declared once, named here
    profile.write_text(
        json.dumps(
            {
                "inherit": str(repo / "configs" / "demo.yaml"),
                "endpoints": {"judge": endpoint},
                "evaluate": {"judge": judge},
            }
        )
    )
    # the judge's replies, in order: plain, the "Correct: yes" (case), markdown, and a "no"
    for reply in ("correct: yes", "Correct: yes", "**correct:** yes", "correct: no"):
        server.push(
            Reply(body=completion(f"extracted_final_answer: x\nreasoning: r\n{reply}\nconfidence: 90"))
        )
    out = tmp_path / "metrics.json"
    result = CliRunner().invoke(
        app,
        [
            "score",
            "-p",
            str(tmp_path / "browsecomp.round_0.jsonl"),
            "--tasks",
            str(tasks),
            "--config",
            str(profile),
            "--out",
            str(out),
        ],  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    assert (
        "browsecomp: scored by simple-evals-browsecomp v1 (nvidia-simple-evals 26.3); 4 of 4" in result.stdout
    )
    document = json.loads(out.read_text())
    assert document["benchmarks"]["browsecomp"]["pass@1"] == 0.25  # only the plain "correct: yes"
    assert document["scorers"]["browsecomp"]["scorers"][0]["package"] == "nvidia-simple-evals 26.3"
    assert server.hits == 4 and all(r.body["messages"][0]["role"] == "user" for r in server.requests)
