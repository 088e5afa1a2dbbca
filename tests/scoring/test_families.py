"""Scoring per family on imported benchmark rows: math-verify, QA EM/F1, LiveCodeBench functional
tests through the ``fn_name`` harness, stdin tests, and a judged web answer replayed from the cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coa.scoring.code import PRELUDE, program_and_tests
from coa.scoring.judge import LLMJudge
from coa.scoring.tasks import score_prediction
from coa.tasksets.config import TaskSourceConfig
from coa.tasksets.importer import import_tasks
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.llm.helpers import judge_config


@pytest.fixture(scope="module")
def lcb(afm_fixtures: Path) -> dict[str, dict[str, Any]]:
    rows = import_tasks([TaskSourceConfig(path=str(afm_fixtures / "livecodebench_v5.parquet"))]).tasks
    return {r["task_id"].split(":")[-1]: r for r in rows.to_pylist()}


@pytest.fixture(scope="module")
def afm_fixtures() -> Path:
    from tests.conftest import FIXTURES

    return FIXTURES


X_SUM = """
def findXSum(nums, k, x):
    out = []
    for i in range(len(nums) - k + 1):
        counts = Counter(nums[i:i + k])
        top = sorted(counts.items(), key=lambda kv: (-kv[1], -kv[0]))[:x]
        out.append(sum(v * c for v, c in top))
    return out
"""


AS_CLASS = """class Solution:
    def findXSum(self, nums: List[int], k: int, x: int) -> List[int]:
        out = []
        for i in range(len(nums) - k + 1):
            top = sorted(Counter(nums[i:i + k]).items(), key=lambda kv: (-kv[1], -kv[0]))[:x]
            out.append(sum(v * c for v, c in top))
        return out
"""


def functional_task(lcb: dict[str, dict[str, Any]]) -> dict[str, Any]:
    task = next(t for key, t in lcb.items() if t["test_cases"]["kind"] == "functional" and "findXSum" in (
        t["test_cases"]["functional"] or ""))  # fmt: skip
    assert task["test_cases"]["fn_name"] == "findXSum"
    return task


@pytest.mark.sandbox
def test_livecodebench_functional_task_through_the_fn_name_harness(lcb: dict[str, dict[str, Any]]) -> None:
    task = functional_task(lcb)
    as_class = AS_CLASS
    fenced_function = f"```py\n{X_SUM}\n```"  # a top-level function, as many answers are written
    wrong = fenced_function.replace("[:x]", "[:1]")
    assert score_prediction(task, as_class) == (True, 1.0)
    assert score_prediction(task, fenced_function) == (True, 1.0)
    assert score_prediction(task, wrong) == (False, 0.0)
    program, tests = program_and_tests(fenced_function, task["test_cases"])
    assert program.startswith(PRELUDE) and "class Solution" in program and len(tests) == 1


@pytest.mark.sandbox
def test_livecodebench_stdin_task(lcb: dict[str, dict[str, Any]]) -> None:
    task = next(t for t in lcb.values() if t["test_cases"]["kind"] == "stdin")
    program = "```python\nprint('not it')\n```"
    assert score_prediction(task, program) == (False, 0.0)
    assert score_prediction(task, None) == (False, 0.0)


def test_math_and_qa_rows() -> None:
    math_task = {"family": "math", "gold_answers": ["204"], "question": "q"}
    assert score_prediction(math_task, "\\boxed{204}") == (True, 1.0)
    assert score_prediction(math_task, "The answer is $\\frac{408}{2}$") == (True, 1.0)
    assert score_prediction(math_task, "\\boxed{205}") == (False, 0.0)
    qa = {"family": "mhqa", "gold_answers": ["Wilhelm Conrad Röntgen"], "question": "q"}
    assert score_prediction(qa, "the Wilhelm Conrad Röntgen.") == (True, 1.0)
    assert score_prediction(qa, "Röntgen")[0] is False
    # web without a judge: token F1 is the score, correct at F1 >= 0.8
    web = {"family": "web", "gold_answers": ["Wilhelm Conrad Röntgen"], "question": "q"}
    correct, f1 = score_prediction(web, "Röntgen")
    assert not correct and f1 == pytest.approx(0.5)


def test_judged_web_answer_is_replayed_from_the_cache(server: FakeLLMServer, tmp_path: Path) -> None:
    server.reset()
    body = json.dumps({"rationale": "same person", "judgement": "correct"})
    server.push(Reply(body=completion(body)))
    web = {"family": "web", "gold_answers": ["Wilhelm Conrad Röntgen"], "question": "Who found X-rays?"}
    first = LLMJudge(judge_config(server, tmp_path / "cache"))
    try:
        assert score_prediction(web, "W. C. Roentgen", judge=first) == (True, 1.0)
        assert score_prediction(web, "Wilhelm Conrad Röntgen", judge=first) == (True, 1.0)  # exact: no call
    finally:
        first.close()
    assert server.hits == 1
    again = LLMJudge(judge_config(server, tmp_path / "cache"))  # a new run over the same store
    try:
        assert score_prediction(web, "W. C. Roentgen", judge=again) == (True, 1.0)
    finally:
        again.close()
    assert server.hits == 1  # replayed from the cache, identical verdict, no request
