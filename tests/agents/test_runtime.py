"""The multi-agent runtime against a scripted backend and plain-function tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import schemas
from coa.agents.backend import BudgetStop, Message, ModelError, ModelReply
from coa.agents.runtime import MultiAgentTeacher, TeacherConfig
from coa.tools.sandbox import SandboxUnavailable
from coa.tools.toolbox import FunctionToolBox, ObservationStore, ReplayMiss

TASK = {"task_id": "t:0", "family": "mhqa", "question": "Who founded Zorvak?", "gold_answers": ["Mira Tolen"]}

Script = dict[str, list[str | Callable[[list[Message]], str] | Exception]]


class ScriptedBackend:
    """Replies per agent from a script, in order; records every call."""

    name = "scripted"

    def __init__(self, script: Script) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.calls: list[tuple[str, list[Message]]] = []

    async def chat(self, agent: str, messages: list[Message]) -> ModelReply:
        self.calls.append((agent, messages))
        item = self.script[agent].pop(0)
        if isinstance(item, Exception):
            raise item
        text = item(messages) if callable(item) else item
        return ModelReply(text=text, prompt_tokens=10, completion_tokens=5, latency_s=0.01)


def act(thought: str, name: str, value: str) -> str:
    return f"Thought: {thought}\nAction: {name}\nAction Input: {value}"


GOOD_REFLECTION = (
    "Information Conflict: good\nTool Effectiveness: good\nTrajectory Monitoring: good\nReflection: on track"
)


def tools(calls: list[str] | None = None) -> FunctionToolBox:
    def web_search(q: str) -> str:
        if calls is not None:
            calls.append(q)
        return "Zorvak: Zorvak was founded by Mira Tolen in 1841."

    return FunctionToolBox(
        {"web_search": web_search, "code": lambda c: "[EXECUTED] Code exited with status 0."}
    )


def happy_script() -> Script:
    return {
        "manager": [
            "1. Ask search_agent who founded Zorvak. 2. Answer.",
            act("I need the founder.", "search_agent", "Who founded Zorvak?"),
            act("The search says Mira Tolen.", "final_answer", "Mira Tolen"),
            act("Verified.", "final_answer", "Mira Tolen"),
        ],
        "search_agent": [
            act("Search for the founder.", "web_search", "Zorvak founder"),
            act("Found it.", "final_answer", "Mira Tolen founded Zorvak (search result 1)."),
        ],
        "reflector": [GOOD_REFLECTION],
        "verifier": ["Suggested Answer: Mira Tolen\nScore: 4\nAnalysis: stated in the search result"],
    }


def solve(backend: ScriptedBackend, toolbox: FunctionToolBox, **cfg: object) -> dict:
    teacher = MultiAgentTeacher(backend, toolbox, TeacherConfig(**{"reflect_every": 1, **cfg}))  # type: ignore[arg-type]
    return asyncio.run(teacher.solve(TASK))


def test_happy_path_records_every_step_in_order() -> None:
    backend = ScriptedBackend(happy_script())
    row = solve(backend, tools())
    assert row["status"] == "completed" and row["final_answer"] == "Mira Tolen"
    roles = [(s["agent"], s["role"]) for s in row["steps"]]
    assert roles == [
        ("manager", "plan"),
        ("manager", "think"),
        ("search_agent", "think"),
        ("search_agent", "tool_call"),
        ("search_agent", "think"),
        ("manager", "delegate"),
        ("reflector", "reflection"),
        ("manager", "think"),
        ("verifier", "verification"),
        ("manager", "think"),
        ("manager", "final_answer"),
    ]
    tool = row["steps"][3]
    assert tool["tool_name"] == "web_search" and json.loads(tool["tool_args"]) == {"query": "Zorvak founder"}
    assert "Mira Tolen in 1841" in tool["observation"]
    assert json.loads(row["steps"][6]["fields"])["information_conflict"] == "good"
    assert json.loads(row["steps"][8]["fields"]) == {"suggested_answer": "Mira Tolen", "score": 4}
    assert row["n_tool_calls"] == 1 and row["prompt_tokens"] == 10 * 8
    schemas.TRAJECTORY.from_rows([row])  # the row satisfies the contract


def test_low_verification_score_triggers_replan_then_answer() -> None:
    script = happy_script()
    script["manager"] = [
        "1. guess",
        act("Guess.", "final_answer", "Someone"),
        "1. Ask search_agent who founded Zorvak.",
        act("I need the founder.", "search_agent", "Who founded Zorvak?"),
        act("Found.", "final_answer", "Mira Tolen"),
        act("Verified.", "final_answer", "Mira Tolen"),
    ]
    script["verifier"] = ["Suggested Answer: Someone\nScore: 1\nAnalysis: no evidence", *script["verifier"]]
    row = solve(ScriptedBackend(script), tools())
    plans = [s for s in row["steps"] if s["role"] == "plan"]
    assert len(plans) == 2 and "verification score 1" in json.loads(plans[1]["fields"])["replan_reason"]
    assert row["final_answer"] == "Mira Tolen" and row["status"] == "completed"


def test_poor_reflection_triggers_replan() -> None:
    script = happy_script()
    script["reflector"] = [GOOD_REFLECTION.replace("Tool Effectiveness: good", "Tool Effectiveness: poor")]
    script["manager"].insert(2, "1. New plan: answer from the search result.")
    row = solve(ScriptedBackend(script), tools())
    plans = [s for s in row["steps"] if s["role"] == "plan"]
    assert len(plans) == 2 and json.loads(plans[1]["fields"])["replan_reason"] == "a poor reflection grade"


def test_malformed_reply_is_an_error_step_and_is_retried() -> None:
    script = happy_script()
    script["search_agent"].insert(0, "I think I will search now")  # no Thought/Action lines
    row = solve(ScriptedBackend(script), tools())
    errors = [s for s in row["steps"] if s["role"] == "error"]
    assert len(errors) == 1 and errors[0]["error"].startswith("AgentParsingError")
    assert row["status"] == "completed"


def test_persistent_format_failure_ends_run_with_error() -> None:
    script = happy_script()
    script["manager"] = ["1. plan", "nonsense", "nonsense", "nonsense"]
    row = solve(ScriptedBackend(script), tools())
    assert row["status"] == "error" and "AgentParsingError" in row["error"]
    assert row["final_answer"] is None


def test_context_length_error_is_recorded() -> None:
    script = happy_script()
    script["manager"][1] = ModelError("ContextLengthExceeded", "prompt is 40000 tokens, limit 32768")
    row = solve(ScriptedBackend(script), tools())
    assert row["status"] == "error" and "ContextLengthExceeded" in row["error"]
    assert row["steps"][-1]["role"] == "error"


def test_step_limit() -> None:
    loop = [act("search again", "search_agent", "Who founded Zorvak?")] * 3
    script = happy_script()
    script["manager"] = ["1. plan", *loop]
    script["search_agent"] = [act("done", "final_answer", "unknown")] * 3
    row = solve(ScriptedBackend(script), tools(), max_steps=3, reflect_every=0)
    assert row["status"] == "step_limit" and row["final_answer"] is None


def test_wall_time_limit() -> None:
    class Slow(ScriptedBackend):
        async def chat(self, agent: str, messages: list[Message]) -> ModelReply:
            await asyncio.sleep(5)
            return await super().chat(agent, messages)

    row = solve(Slow(happy_script()), tools(), wall_time_s=0.2)
    assert row["status"] == "time_limit"


def test_budget_stop_propagates() -> None:
    script = happy_script()
    script["manager"][1] = BudgetStop("token budget of 1000 reached")
    teacher = MultiAgentTeacher(ScriptedBackend(script), tools())
    with pytest.raises(BudgetStop):
        asyncio.run(teacher.solve(TASK))


def test_tool_failure_is_an_observation() -> None:
    def broken(q: str) -> str:
        raise ConnectionError("search backend down")

    row = solve(ScriptedBackend(happy_script()), FunctionToolBox({"web_search": broken}))
    call = next(s for s in row["steps"] if s["role"] == "tool_call")
    assert call["error"] == "ToolError: ConnectionError" and "search backend down" in call["observation"]


def test_missing_sandbox_stops_the_run_instead_of_becoming_an_observation() -> None:
    """Without a sandbox every code call would fail the same way: a run (and a collection) of such
    observations is garbage, so the teacher stops with the install hint instead."""

    def no_sandbox(q: str) -> str:
        raise SandboxUnavailable("refusing to run code without a sandbox: apt-get install bubblewrap")

    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        solve(ScriptedBackend(happy_script()), FunctionToolBox({"web_search": no_sandbox}))


def test_record_then_replay_offline(tmp_path: Path) -> None:
    calls: list[str] = []
    store = ObservationStore(str(tmp_path), mode="record")
    box = tools(calls)
    box.store = store
    first = solve(ScriptedBackend(happy_script()), box)
    assert calls == ["Zorvak founder"]

    def offline(q: str) -> str:
        raise AssertionError("replay must not call the tool")

    replay = FunctionToolBox({"web_search": offline}, store=ObservationStore(str(tmp_path), mode="replay"))
    second = solve(ScriptedBackend(happy_script()), replay)
    obs = [s["observation"] for s in second["steps"] if s["role"] == "tool_call"]
    assert obs == [s["observation"] for s in first["steps"] if s["role"] == "tool_call"]
    with pytest.raises(ReplayMiss):
        asyncio.run(replay.call("web_search", "never recorded"))
