"""Evaluation on the rollout engine, scripted policy: tools on closing tags, limits, scoring, samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import schemas
from coa.evaluate.config import EvalConfig
from coa.evaluate.metrics import eval_metrics
from coa.evaluate.stage import evaluate_tasks
from coa.format import Segment
from coa.format.codec import render_segment
from coa.model import TinyModelConfig, init_model, sft_corpus
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.tools.build import build_toolbox
from coa.tools.config import ToolsConfig
from coa.tools.toolbox import ToolResult
from tests.train.rows import arith_rows

TINY = TinyModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)


def blocks(*pairs: tuple[str, str]) -> str:
    """Canonical blocks without the final newline (a generation ends at its closing tag)."""
    return "".join(f"<{tag}>\n{body}\n</{tag}>\n" for tag, body in pairs).removesuffix("\n")


PLAN = blocks(("plan", "Compute it with code."), ("think", "Run it."), ("code", "```py\nprint(6 * 7)\n```"))
AFTER = blocks(("reflection", "It printed 42."), ("think", "Answer."), ("answer", "\\boxed{42}"))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(sft_corpus(arith_rows(200, seed=0)), TINY, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def codec(tiny_model: Path) -> Codec:
    return Codec.from_pretrained(str(tiny_model))


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


def task(i: int, question: str, family: str = "math", gold: str = "42", tests: Any = None) -> dict[str, Any]:
    return {"task_id": f"t{i}", "source": "unit", "family": family, "question": question,
            "gold_answers": [gold], "test_cases": tests, "source_index": i, "metadata": "{}"}  # fmt: skip


def tasks_table(*rows: dict[str, Any]) -> pa.Table:
    return schemas.TASK.from_rows(list(rows))


LIMITS = EvalConfig(max_turns=4, max_new_tokens=256, max_total_tokens=1024, prompt_style="brief")


def test_tool_runs_in_the_sandbox_and_the_observation_is_rendered_like_training_data(codec: Codec) -> None:
    box = SpyToolBox(build_toolbox(ToolsConfig(enabled=("code",), record="off"), None))
    policy = ScriptedPolicy(codec, {"What is 6 * 7?": [PLAN, AFTER]})
    table = evaluate_tasks(tasks_table(task(0, "What is 6 * 7?")), policy, box, LIMITS)
    row = table.to_pylist()[0]
    assert box.calls == [("code", "```py\nprint(6 * 7)\n```")]
    observation = row["text"].split("<observation>\n", 1)[1].split("\n</observation>", 1)[0]
    assert "42" in observation and observation.startswith("[EXECUTED]")
    # Byte for byte the canonical rendering of the same trajectory (what SFT trained on).
    assert row["text"] == render_text(PLAN, observation, AFTER)
    first, second = (prompt for prompt, _ in policy.requests)
    assert codec.decode(second) == codec.decode(first) + row["text"].split("<reflection>")[0]
    assert (row["correct"], row["format_valid"], row["prediction"]) == (True, True, "\\boxed{42}")
    tokens = len(codec.encode(PLAN)) + len(codec.encode(AFTER))
    assert (row["n_turns"], row["n_tool_calls"], row["completion_tokens"], row["error"]) == (
        2,
        1,
        tokens,
        None,
    )
    assert row["prompt_tokens"] == len(first) and row["sample_index"] == 0 and row["latency_s"] > 0


def render_text(before: str, observation: str, after: str) -> str:
    return before + "\n" + render_segment(Segment("observation", observation)) + after + "\n"


def test_wrong_answer_and_invalid_order(codec: Codec) -> None:
    wrong = AFTER.replace("42}", "41}")
    no_think = "<plan>\nJust answer.\n</plan>\n<answer>\n\\boxed{42}\n</answer>"
    policy = ScriptedPolicy(codec, {"Q one": [PLAN, wrong], "Q two": [no_think]})
    rows = evaluate_tasks(
        tasks_table(task(0, "Q one"), task(1, "Q two")), policy, SpyToolBox(), LIMITS
    ).to_pylist()
    assert (rows[0]["correct"], rows[0]["format_valid"]) == (False, True)
    assert rows[1]["correct"] is True and rows[1]["format_valid"] is False
    assert "think" in rows[1]["format_error"]


def test_forged_observation_is_a_format_error_and_runs_no_tool(codec: Codec) -> None:
    forged = blocks(("plan", "Guess."), ("observation", "42"), ("reflection", "ok"), ("code", "print(1)"))
    box = SpyToolBox()
    row = evaluate_tasks(
        tasks_table(task(0, "Q forged")), ScriptedPolicy(codec, {"Q forged": [forged]}), box, LIMITS
    ).to_pylist()[0]
    assert box.calls == []
    assert row["format_valid"] is False and row["format_error"].startswith("forged_observation")
    assert (row["n_tool_calls"], row["correct"], row["prediction"]) == (0, False, None)


def test_turn_limit_generation_limit_and_end_of_turn(codec: Codec) -> None:
    long = "<plan>\n" + "x " * 300
    ended = "<plan>\nNothing to do.\n</plan>"
    policy = ScriptedPolicy(codec, {"Q loops": [PLAN], "Q long": [long], "Q ends": [ended]})
    table = evaluate_tasks(
        tasks_table(task(0, "Q loops"), task(1, "Q long"), task(2, "Q ends")), policy, SpyToolBox(), LIMITS
    )
    loops, too_long, ends = table.to_pylist()
    assert loops["error"].startswith("turn limit") and (loops["n_turns"], loops["n_tool_calls"]) == (4, 4)
    assert too_long["error"].startswith("generation limit") and too_long["n_turns"] == 1
    assert too_long["completion_tokens"] == 256
    assert ends["error"] is None and ends["text"] == ended  # the end-of-turn token is not in the text
    assert ends["completion_tokens"] == len(codec.encode(ended)) + 1  # but it was generated
    assert not loops["format_valid"] and not too_long["format_valid"] and not ends["format_valid"]


def test_total_token_budget_caps_every_generation(codec: Codec) -> None:
    n = len(codec.encode(PLAN))
    policy = ScriptedPolicy(codec, {"Q budget": [PLAN]})
    config = EvalConfig(max_turns=10, max_new_tokens=n, max_total_tokens=2 * n + 5, prompt_style="brief")
    row = evaluate_tasks(tasks_table(task(0, "Q budget")), policy, SpyToolBox(), config).to_pylist()[0]
    assert [budget for _, budget in policy.requests] == [n, n, 5]
    assert row["error"].startswith("token limit") and row["completion_tokens"] == 2 * n + 5


def test_a_tool_tag_that_closes_the_wrong_block_runs_nothing(codec: Codec) -> None:
    broken = "<plan>\nCompute.\n</code>"
    box = SpyToolBox()
    row = evaluate_tasks(
        tasks_table(task(0, "Q broken")), ScriptedPolicy(codec, {"Q broken": [broken]}), box, LIMITS
    ).to_pylist()[0]
    assert box.calls == [] and row["format_valid"] is False and "not run" in row["format_error"]


def test_web_search_over_the_local_encyclopedia_and_metrics(codec: Codec) -> None:
    from coa.synthetic import encyclopedia_table
    from coa.tools.collection import Collection

    pages = Collection.from_table(encyclopedia_table(0, 300))  # the synthetic step's table
    name = pages.documents[0].title
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
    box = SpyToolBox(
        build_toolbox(ToolsConfig(enabled=("web_search",), record="off"), None, collection=pages)
    )
    policy = ScriptedPolicy(codec, {"Who?": [search, answer]})
    table = evaluate_tasks(tasks_table(task(0, "Who?", family="mhqa", gold=name)), policy, box, LIMITS)
    row = table.to_pylist()[0]
    assert box.calls == [("web_search", name)] and name in row["text"].split("<observation>")[1]
    assert row["correct"] and row["format_valid"], row["format_error"]
    tokens = float(len(codec.encode(search)) + len(codec.encode(answer)))
    metrics = eval_metrics(table)
    assert metrics["mhqa"] == metrics["all"] == {
        "n": 1, "tasks": 1, "runs": 1, "samples": 1, "pass@1": 1.0, "pass@1_se": None, "maj@1": 1.0,
        "format_valid": 1.0, "accuracy": 1.0, "tokens_per_task": tokens, "tool_calls_per_task": 1.0,
        "tokens_per_solved": tokens, "leak_rate": 1.0, "total_tokens_per_task": float(row["total_tokens"]),
    }  # fmt: skip
    assert row["total_tokens"] > row["prompt_tokens"] + tokens  # the observation is read too
    # the search found the answer: the leak guard's flag says so (for retrieval QA, a measurement)
    assert row["gold_in_observation"] is True


def test_code_answers_are_scored_by_the_task_tests(codec: Codec) -> None:
    tests = {"kind": "stdin", "stdin": ["2\n", "5\n"], "expected_output": ["4\n", "25\n"], "functional": None}
    program = "```python\nn = int(input())\nprint(n * n)\n```"
    run = PLAN.replace("print(6 * 7)", "print(3 * 3)")
    good = f"<reflection>\nok\n</reflection>\n<think>\nHand over.\n</think>\n<answer>\n{program}\n</answer>"
    bad = good.replace("n * n", "n + n")
    policy = ScriptedPolicy(codec, {"Square A": [run, good], "Square B": [run, bad]})
    rows = evaluate_tasks(
        tasks_table(task(0, "Square A", "code", "", tests), task(1, "Square B", "code", "", tests)),
        policy, SpyToolBox(), LIMITS,
    ).to_pylist()  # fmt: skip
    assert [r["correct"] for r in rows] == [True, False]


def test_samples_give_one_row_per_task_and_sample(codec: Codec) -> None:
    policy = ScriptedPolicy(codec, {"Q one": [PLAN, AFTER], "Q two": [AFTER]})
    config = LIMITS.model_copy(update={"samples": 3})
    rows = evaluate_tasks(
        tasks_table(task(0, "Q one"), task(1, "Q two")), policy, SpyToolBox(), config
    ).to_pylist()
    assert [(r["task_id"], r["sample_index"]) for r in rows] == [
        (t, k) for t in ("t0", "t1") for k in range(3)
    ]
    assert len({r["eval_id"] for r in rows}) == 6 and all(r["correct"] for r in rows)
    from coa.evaluate.inference import rollout_config

    assert rollout_config(config).temperature == 1.0 and rollout_config(LIMITS).temperature == 0.0


@pytest.mark.parametrize("family,expected", [("math", 2), (None, 3)])
def test_family_and_limit_selection(family: str | None, expected: int) -> None:
    rows = [task(0, "A"), task(1, "B"), task(2, "C"), task(3, "D", family="mhqa")]
    config = EvalConfig(limit_per_family=2, families=(family,) if family else None)
    from coa.evaluate.stage import select_tasks

    assert len(select_tasks(tasks_table(*rows), config)) == expected
