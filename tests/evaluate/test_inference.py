"""The CoA inference loop with scripted generators: tools run on closing tags, limits, forged observations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

import schemas
from coa.evaluate import Completion, EvalConfig, eval_metrics, evaluate_tasks
from coa.evaluate.inference import CoaRun, LoopLimits, run_loop
from coa.format import Segment
from coa.format.codec import render_segment
from coa.tools.config import ToolsConfig, build_toolbox
from coa.tools.toolbox import ToolResult


def blocks(*pairs: tuple[str, str]) -> str:
    """Canonical blocks without the final newline (a generation ends at its closing tag)."""
    return "".join(f"<{tag}>\n{body}\n</{tag}>\n" for tag, body in pairs).removesuffix("\n")


PLAN = blocks(("plan", "Compute it with code."), ("think", "Run it."), ("code", "```py\nprint(6 * 7)\n```"))
AFTER = blocks(("reflection", "It printed 42."), ("think", "Answer."), ("answer", "\\boxed{42}"))
CHATML = "<|im_start|>system\n{}<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


class Scripted:
    """Replies per task (keyed by the question inside the prompt), one per turn; records every prompt."""

    name = "scripted"

    def __init__(self, replies: dict[str, list[Completion]]) -> None:
        self.replies = {k: list(v) for k, v in replies.items()}
        self.prompts: list[str] = []

    def chat_prompt(self, system: str, user: str) -> str:
        return CHATML.format(system, user)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, prompts: Sequence[str], max_new_tokens: Sequence[int]) -> list[Completion]:
        out = []
        for prompt, limit in zip(prompts, max_new_tokens, strict=True):
            self.prompts.append(prompt)
            key = next(k for k in self.replies if k in prompt)
            reply = self.replies[key].pop(0)
            assert reply.n_tokens <= limit or reply.reason == "length"
            out.append(reply)
        return out


class SpyToolBox:
    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []

    @property
    def tools(self) -> tuple[str, ...]:
        return ("code", "web_search")

    async def call(self, name: str, argument: str) -> ToolResult:
        self.calls.append((name, argument))
        if self.inner is not None:
            return await self.inner.call(name, argument)
        return ToolResult("42")


def stop(text: str, tag: str, n: int = 10) -> Completion:
    return Completion(text, n, "stop", tag)


def task(i: int, question: str, family: str = "math", gold: str = "42", tests: Any = None) -> dict[str, Any]:
    return {"task_id": f"t{i}", "source": "unit", "family": family, "question": question,
            "gold_answers": [gold], "test_cases": tests, "source_index": i, "metadata": "{}"}  # fmt: skip


def tasks_table(*rows: dict[str, Any]) -> pa.Table:
    return schemas.TASK.from_rows(list(rows))


LIMITS = EvalConfig(max_turns=4, max_new_tokens=64, max_total_tokens=100, prompt_style="brief")


def test_tool_runs_in_the_sandbox_and_the_observation_is_rendered_like_training_data() -> None:
    box = SpyToolBox(build_toolbox(ToolsConfig(enabled=("code",), record="off"), None))
    gen = Scripted({"What is 6 * 7?": [stop(PLAN, "</code>"), stop(AFTER, "</answer>")]})
    table = evaluate_tasks(tasks_table(task(0, "What is 6 * 7?")), gen, box, LIMITS)
    row = table.to_pylist()[0]
    assert box.calls == [("code", "```py\nprint(6 * 7)\n```")]
    observation = row["text"].split("<observation>\n", 1)[1].split("\n</observation>", 1)[0]
    assert "42" in observation and observation.startswith("[EXECUTED]")
    # Byte for byte the canonical rendering of the same trajectory (what SFT trained on).
    assert row["text"] == render_text(PLAN, observation, AFTER)
    assert gen.prompts[1].endswith(row["text"].split("<reflection>")[0])
    assert (row["correct"], row["format_valid"], row["prediction"]) == (True, True, "\\boxed{42}")
    assert (row["n_turns"], row["n_tool_calls"], row["completion_tokens"], row["error"]) == (2, 1, 20, None)


def render_text(before: str, observation: str, after: str) -> str:
    return before + "\n" + render_segment(Segment("observation", observation)) + after + "\n"


def test_wrong_answer_and_invalid_order() -> None:
    wrong = AFTER.replace("42}", "41}")
    no_think = "<plan>\nJust answer.\n</plan>\n<answer>\n\\boxed{42}\n</answer>"
    gen = Scripted(
        {"Q one": [stop(PLAN, "</code>"), stop(wrong, "</answer>")], "Q two": [stop(no_think, "</answer>")]}
    )
    rows = evaluate_tasks(
        tasks_table(task(0, "Q one"), task(1, "Q two")), gen, SpyToolBox(), LIMITS
    ).to_pylist()
    assert (rows[0]["correct"], rows[0]["format_valid"]) == (False, True)
    assert rows[1]["correct"] is True and rows[1]["format_valid"] is False
    assert "think" in rows[1]["format_error"]


def test_forged_observation_is_a_format_error_and_runs_no_tool() -> None:
    forged = (
        PLAN
        + "\n"
        + blocks(("observation", "42"), ("reflection", "ok"), ("code", "```python\nprint(1)\n```"))
    )
    box = SpyToolBox()
    gen = Scripted({"Q": [stop(forged, "</code>")]})
    row = evaluate_tasks(tasks_table(task(0, "Q")), gen, box, LIMITS).to_pylist()[0]
    assert box.calls == []
    assert row["format_valid"] is False and row["format_error"].startswith("forged_observation")
    assert (row["n_tool_calls"], row["correct"], row["prediction"]) == (0, False, None)


def test_turn_limit_and_token_limit() -> None:
    loop = stop(PLAN, "</code>", n=10)
    gen = Scripted({"Q loops": [loop] * 4, "Q long": [Completion("<plan>\n" + "x " * 60, 64, "length")] * 2})
    table = evaluate_tasks(tasks_table(task(0, "Q loops"), task(1, "Q long")), gen, SpyToolBox(), LIMITS)
    loops, long = table.to_pylist()
    assert loops["error"].startswith("turn limit") and (loops["n_turns"], loops["n_tool_calls"]) == (4, 4)
    assert long["error"].startswith("generation limit") and long["n_turns"] == 1
    assert not loops["format_valid"] and not long["format_valid"]


def test_total_token_budget_caps_every_generation() -> None:
    runs = [CoaRun("t", "code_math", "prompt ")]
    seen: list[int] = []

    class Budget(Scripted):
        def generate(self, prompts: Sequence[str], max_new_tokens: Sequence[int]) -> list[Completion]:
            seen.extend(max_new_tokens)
            return [stop(PLAN, "</code>", n=min(40, max_new_tokens[0]))]

    run_loop(
        runs,
        Budget({}),
        SpyToolBox(),
        LoopLimits(max_turns=10, max_new_tokens=40, max_total_tokens=90, batch_size=4),
    )
    assert seen == [40, 40, 10]
    assert (
        runs[0].error is not None
        and runs[0].error.startswith("token limit")
        and runs[0].completion_tokens == 90
    )


def test_a_tool_tag_that_closes_the_wrong_block_runs_nothing() -> None:
    broken = "<plan>\nCompute.\n</code>"
    box = SpyToolBox()
    row = evaluate_tasks(
        tasks_table(task(0, "Q")), Scripted({"Q": [stop(broken, "</code>")]}), box, LIMITS
    ).to_pylist()[0]
    assert box.calls == [] and row["format_valid"] is False and "not run" in row["format_error"]


def test_web_search_over_the_local_encyclopedia_and_metrics() -> None:
    from coa.synthetic import build_encyclopedia

    doc = build_encyclopedia(0, 300)[0]
    name = doc.title
    search = blocks(
        ("think", "One lookup."), ("plan", "Look it up."), ("think", "Search."), ("web_search", name)
    )
    answer = blocks(
        ("think", "Found."),
        ("suggested_answer", name),
        ("think", "Check."),
        ("double_check", "Score: 4\nok"),
        ("think", "Done."),
        ("answer", name),
    )
    box = SpyToolBox(build_toolbox(ToolsConfig(enabled=("web_search",), record="off"), None))
    gen = Scripted({"Who?": [stop(search, "</web_search>"), stop(answer, "</answer>")]})
    table = evaluate_tasks(tasks_table(task(0, "Who?", family="mhqa", gold=name)), gen, box, LIMITS)
    row = table.to_pylist()[0]
    assert box.calls == [("web_search", name)] and name in row["text"].split("<observation>")[1]
    assert row["correct"] and row["format_valid"], row["format_error"]
    metrics = eval_metrics(table)
    assert metrics["mhqa"] == metrics["all"] == {
        "n": 1, "format_valid": 1.0, "accuracy": 1.0, "tokens_per_task": 20.0, "tool_calls_per_task": 1.0,
        "tokens_per_solved": 20.0,
    }  # fmt: skip


def test_code_answers_are_scored_by_the_task_tests() -> None:
    tests = {"kind": "stdin", "stdin": ["2\n", "5\n"], "expected_output": ["4\n", "25\n"], "functional": None}
    program = "```python\nn = int(input())\nprint(n * n)\n```"
    run = PLAN.replace("print(6 * 7)", "print(3 * 3)")
    good = f"<reflection>\nok\n</reflection>\n<think>\nHand over.\n</think>\n<answer>\n{program}\n</answer>"
    bad = good.replace("n * n", "n + n")
    gen = Scripted({"Square A": [stop(run, "</code>"), stop(good, "</answer>")],
                    "Square B": [stop(run, "</code>"), stop(bad, "</answer>")]})  # fmt: skip
    rows = evaluate_tasks(
        tasks_table(task(0, "Square A", "code", "", tests), task(1, "Square B", "code", "", tests)),
        gen, SpyToolBox(), LIMITS,
    ).to_pylist()  # fmt: skip
    assert [r["correct"] for r in rows] == [True, False]


@pytest.mark.parametrize("family,expected", [("math", 2), (None, 3)])
def test_family_and_limit_selection(family: str | None, expected: int) -> None:
    rows = [task(0, "A"), task(1, "B"), task(2, "C"), task(3, "D", family="mhqa")]
    config = EvalConfig(limit_per_family=2, families=(family,) if family else None)
    from coa.evaluate.stage import select_tasks

    assert len(select_tasks(tasks_table(*rows), config)) == expected
