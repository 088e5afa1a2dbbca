"""The agents against a fake OpenAI-compatible server on 127.0.0.1, with injected faults.

429 with Retry-After, 500s, a timeout, a malformed body, truncated output and a context-length
error: every task ends either completed or recorded with its error, nothing lost or duplicated.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa

import schemas
from coa.agents.llm_backend import EndpointBackend
from coa.agents.runtime import MultiAgentTeacher, TeacherConfig
from coa.collect import CheckpointFolder, collect_runs, plan_runs
from coa.llm import EndpointConfig, LLMConfig, LLMRouter
from tests.agents.test_runtime import GOOD_REFLECTION, act, tools
from tests.llm.fake_server import FakeLLMServer, Reply, completion


def ok(text: str, finish_reason: str = "stop") -> Reply:
    return Reply(body=completion(text, finish_reason=finish_reason))


def happy_replies() -> list[Reply]:
    return [
        ok("1. Ask search_agent who founded Zorvak. 2. Answer."),
        ok(act("I need the founder.", "search_agent", "Who founded Zorvak?")),
        ok(act("Search.", "web_search", "Zorvak founder")),
        ok(act("Found.", "final_answer", "Mira Tolen founded Zorvak.")),
        ok(GOOD_REFLECTION),
        ok(act("Known now.", "final_answer", "Mira Tolen")),
        ok("Suggested Answer: Mira Tolen\nScore: 4\nAnalysis: from the search result"),
        ok(act("Verified.", "final_answer", "Mira Tolen")),
    ]


def tasks(n: int) -> pa.Table:
    return schemas.TASK.from_rows(
        [
            {
                "task_id": f"z:{i}",
                "source": "z",
                "family": "mhqa",
                "question": f"Who founded Zorvak? ({i})",
                "gold_answers": ["Mira Tolen"],
                "source_index": i,
                "metadata": "{}",
            }
            for i in range(n)
        ]
    )


def test_faults_are_retried_or_recorded(server: FakeLLMServer, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COA_STORAGE_ROOT", str(tmp_path / "store"))
    server.reset()
    first = happy_replies()
    # task 0: transient faults before several replies, and one truncated reply (a format retry)
    server.push(
        Reply(status=429, headers={"Retry-After": "0.1"}, body={"error": {"message": "slow down"}}),
        first[0],
        Reply(status=500, body={"error": {"message": "boom"}}),
        first[1],
        Reply(delay=1.5, body=completion("too late")),  # longer than timeout_s: retried
        first[2],
        Reply(raw="{not json"),
        first[3],
        first[4],  # reflection
        ok("Thought: I will answer but I am cut off mid", finish_reason="length"),
        *first[5:],
    )
    # task 1: the prompt no longer fits: recorded as an error, not retried
    server.push(
        ok("1. plan"),
        Reply(
            status=400,
            body={
                "error": {
                    "message": "This model's maximum context length is 32768 tokens",
                    "code": "context_length_exceeded",
                }
            },
        ),
    )
    # task 2: clean
    server.push(*happy_replies())

    endpoint = EndpointConfig(
        name="fake",
        base_url=server.url,
        model="fake-model",
        max_retries=4,
        backoff_base_s=0.01,
        backoff_max_s=0.02,
        timeout_s=1.0,
        max_tokens=64,
    )
    checkpoints = CheckpointFolder(str(tmp_path / "ckpt"))
    planned = plan_runs(tasks(3), 1)

    async def main() -> None:
        async with LLMRouter(LLMConfig(endpoints=(endpoint,), cache=False)) as router:
            teacher = MultiAgentTeacher(EndpointBackend(router), tools(), TeacherConfig(reflect_every=1))
            outcome = await collect_runs(teacher, planned, checkpoints, concurrency=1)
            assert outcome.ran == 3 and outcome.complete

    asyncio.run(main())
    rows = pa.concat_tables(checkpoints.read([p.run_id for p in planned])).to_pylist()
    assert [r["run_id"] for r in rows] == [p.run_id for p in planned]
    by_task = {r["task_id"]: r for r in rows}
    assert by_task["z:0"]["status"] == "completed" and by_task["z:0"]["final_answer"] == "Mira Tolen"
    truncated = [s for s in by_task["z:0"]["steps"] if s["role"] == "error"]
    assert len(truncated) == 1 and "cut off" in truncated[0]["error"]
    assert by_task["z:1"]["status"] == "error" and "ContextLengthExceeded" in by_task["z:1"]["error"]
    assert by_task["z:2"]["status"] == "completed"
    # usage from the API is what the steps carry (the fake reports 11 prompt / 7 completion tokens)
    assert all(s["prompt_tokens"] in (0, 11) for s in by_task["z:2"]["steps"])
    assert by_task["z:2"]["prompt_tokens"] == 11 * 8
