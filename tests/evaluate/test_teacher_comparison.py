"""Teacher and student on the same imported benchmark file, both with real-tokenizer token counts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coa.agents.tokens import qwen_token_count
from coa.evaluate.config import EvalConfig
from coa.evaluate.metrics import benchmark_metrics
from coa.evaluate.stage import evaluate_tasks
from coa.evaluate.teacher_comparison import teacher_eval_table, token_comparison
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.tasksets.config import TaskSourceConfig
from coa.tasksets.importer import import_tasks
from tests.agents.test_runtime import act
from tests.conftest import FIXTURES
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.rollout.helpers import blocks

from .test_inference import codec, tiny_model  # noqa: F401 (fixtures)


def test_qwen_counter_is_the_real_vocabulary() -> None:
    assert qwen_token_count("") == 0
    assert qwen_token_count("<|im_end|>") == 1  # a special token, not 10 bytes / 4
    text = "The quick brown fox jumps over the lazy dog."
    assert qwen_token_count(text) == 10 != -(-len(text.encode()) // 4)


def test_the_offline_teacher_counts_with_the_qwen_vocabulary(synthetic_tasks: dict[str, Any]) -> None:
    from coa.agents.offline import RuleBasedBackend
    from coa.llm.tokens import estimate_prompt_tokens

    question = synthetic_tasks["train"].to_pylist()[0]["question"]
    messages = [{"role": "system", "content": "You are the manager."},
                {"role": "user", "content": f"Task:\n{question}\n\nPlan:\n1. Compute."}]  # fmt: skip
    reply = asyncio.run(RuleBasedBackend().chat("manager", messages))  # type: ignore[arg-type]
    assert reply.text and reply.completion_tokens == qwen_token_count(reply.text)
    assert reply.prompt_tokens == estimate_prompt_tokens(messages, qwen_token_count)


def teacher_script(answer: str) -> list[Reply]:
    return [
        Reply(body=completion("1. Work it out. 2. Answer.")),
        Reply(body=completion(act("Known.", "final_answer", answer))),
        Reply(body=completion(f"Suggested Answer: {answer}\nScore: 4\nAnalysis: checked")),
        Reply(body=completion(act("Verified.", "final_answer", answer))),
    ]


def test_teacher_and_student_on_the_same_aime_file(codec: Codec, server: FakeLLMServer) -> None:  # noqa: F811
    from coa.agents.llm_backend import EndpointBackend
    from coa.agents.runtime import MultiAgentTeacher, TeacherConfig
    from coa.llm import EndpointConfig, LLMConfig, LLMRouter
    from tests.agents.test_runtime import tools

    tasks = import_tasks([TaskSourceConfig(path=str(FIXTURES / "aime24.parquet"), limit=2)]).tasks
    rows = tasks.to_pylist()
    server.reset()
    server.push(*teacher_script(rows[0]["gold_answers"][0]), *teacher_script("7"))
    endpoint = EndpointConfig(
        name="fake", base_url=server.url, model="teacher-model", max_retries=1, backoff_base_s=0.01,
        backoff_max_s=0.02, timeout_s=5, max_tokens=64,
    )  # fmt: skip

    async def solve() -> list[dict[str, Any]]:
        async with LLMRouter(LLMConfig(endpoints=(endpoint,), cache=False)) as router:
            teacher = MultiAgentTeacher(EndpointBackend(router), tools(), TeacherConfig(reflect_every=0))
            return [await teacher.solve(t) for t in rows]  # one after the other: the script is in order

    import schemas

    runs = schemas.TRAJECTORY.from_rows(asyncio.run(solve()))
    for run in runs.to_pylist():  # the endpoint's usage, per call (the fake answers 11 + 7 tokens)
        calls = [s for s in run["steps"] if s["completion_tokens"]]
        assert (
            calls and run["prompt_tokens"] == 11 * len(calls) and run["completion_tokens"] == 7 * len(calls)
        )
    teacher = teacher_eval_table(runs, tasks)
    assert teacher.num_rows == 2 and set(teacher.column("benchmark").to_pylist()) == {"aime24"}

    gold = {r["question"][:40]: r["gold_answers"][0] for r in rows}
    replies = {q: [blocks(("think", "Known."), ("answer", f"\\boxed{{{g}}}"))] for q, g in gold.items()}
    config = EvalConfig(max_turns=2, max_new_tokens=64, max_total_tokens=128, prompt_style="brief", samples=2)
    student = evaluate_tasks(tasks, ScriptedPolicy(codec, replies), None, config)
    for row in student.to_pylist():  # the student's own tokenizer: prompt + what it generated
        assert row["total_tokens"] == row["prompt_tokens"] + len(codec.encode(row["text"]))

    s_metrics, t_metrics = benchmark_metrics(student), benchmark_metrics(teacher)
    [aime, overall] = token_comparison(s_metrics, t_metrics)
    assert aime["benchmark"] == "aime24" and overall["benchmark"] == "all"
    assert aime["student_pass@1"] == 1.0 and aime["student_pass@1_se"] == 0.0
    s_tokens = sum(student.column("total_tokens").to_pylist()) / 4
    t_tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in runs.to_pylist()) / 2
    assert aime["student_tokens_per_task"] == pytest.approx(s_tokens)
    assert aime["teacher_tokens_per_task"] == pytest.approx(t_tokens)
    assert aime["token_reduction"] == pytest.approx(1 - s_tokens / t_tokens)
    assert aime["cost_of_pass_unit"] == "tokens"
    if aime["teacher_pass@1"]:
        assert aime["cost_of_pass_ratio"] == pytest.approx(s_tokens / (t_tokens / aime["teacher_pass@1"]))
    else:
        assert aime["cost_of_pass_ratio"] is None  # the teacher never passed: no finite cost of a pass
