"""Builders of realistic ``trajectory.v1`` rows and helpers shared by the curate tests."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from coa.curate.config import CurateConfig
from coa.curate.core import CurateResult, curate
from coa.curate.stats import CurationStats
from schemas.task import TASK
from schemas.trajectory import TRAJECTORY

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def step(
    index: int,
    agent: str,
    role: str,
    text: str | None = None,
    *,
    tool_name: str | None = None,
    tool_args: dict[str, Any] | None = None,
    observation: str | None = None,
    error: str | None = None,
    fields: dict[str, Any] | None = None,
    tokens: tuple[int, int] = (100, 20),
) -> dict[str, Any]:
    return {
        "index": index,
        "agent": agent,
        "role": role,
        "text": text,
        "tool_name": tool_name,
        "tool_args": json.dumps(tool_args) if tool_args is not None else None,
        "observation": observation,
        "fields": json.dumps(fields) if fields is not None else None,
        "prompt_tokens": tokens[0] if agent != "manager" or role != "delegate" else 0,
        "completion_tokens": tokens[1] if agent != "manager" or role != "delegate" else 0,
        "latency_s": 0.1,
        "error": error,
        "started_at": T0 + dt.timedelta(seconds=index),
    }


def run(
    run_id: str,
    question: str,
    answer: str | None = "Mira Tolen",
    *,
    task_id: str | None = None,
    gold: Sequence[str] = ("Mira Tolen",),
    family: str = "mhqa",
    status: str = "completed",
    error: str | None = None,
    calls: Iterable[tuple[str, str, str, str | None]] | None = None,
    observation: str = "Zorvak: Zorvak was founded by Mira Tolen in 1841.",
    extra_steps: Sequence[dict[str, Any]] = (),
    tokens: tuple[int, int] = (100, 20),
    sample_index: int = 0,
) -> dict[str, Any]:
    """A multi-agent run: plan, delegation with search-agent tool calls, reflection, verification,
    final answer. ``calls`` = (tool, query, observation, error) per search-agent tool call."""
    calls = (
        list(calls) if calls is not None else [("web_search", f"{question[:40]} founder", observation, None)]
    )
    steps: list[dict[str, Any]] = []

    def add(*args: Any, **kwargs: Any) -> None:
        steps.append(step(len(steps), *args, tokens=tokens, **kwargs))

    add("manager", "plan", "1. Ask the search agent. 2. Answer.")
    add("manager", "think", "I need to search.", fields={"action": "search_agent"})
    for tool, query, obs, err in calls:
        add("search_agent", "think", f"Search for {query}.", fields={"action": tool})
        add(
            "search_agent",
            "tool_call",
            query,
            tool_name=tool,
            tool_args={"query": query},
            observation=obs,
            error=err,
        )
    add("search_agent", "think", "Found it.", fields={"action": "final_answer"})
    add(
        "manager",
        "delegate",
        question,
        tool_name="search_agent",
        tool_args={"task": question},
        observation=f"The answer is {answer}.",
    )
    for s in extra_steps:
        steps.append({**s, "index": len(steps)})
    add("reflector", "reflection", "on track", fields={"information_conflict": "good"})
    if answer is not None and status == "completed":
        add(
            "verifier",
            "verification",
            "stated in the source",
            fields={"suggested_answer": answer, "score": 4},
        )
        add("manager", "final_answer", answer)
    return {
        "run_id": run_id,
        "task_id": task_id or f"t:{run_id}",
        "family": family,
        "question": question,
        "gold_answers": list(gold),
        "teacher": "test/scripted",
        "teacher_config": "{}",
        "sample_index": sample_index,
        "steps": steps,
        "final_answer": answer if status == "completed" else None,
        "correct": None,
        "status": status,
        "error": error,
        "n_steps": len(steps),
        "n_tool_calls": sum(1 for s in steps if s["role"] == "tool_call"),
        "prompt_tokens": sum(s["prompt_tokens"] for s in steps),
        "completion_tokens": sum(s["completion_tokens"] for s in steps),
        "cost_usd": None,
        "latency_s": 3.0,
        "started_at": T0,
        "finished_at": T0 + dt.timedelta(seconds=30),
    }


def table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return TRAJECTORY.from_rows(list(rows))


def score(answer: str | None, golds: list[str], family: str) -> bool | None:
    """Case-insensitive exact match; code runs cannot be scored here."""
    if family == "code" or answer is None:
        return None
    return answer.strip().lower() in {g.strip().lower() for g in golds}


def coa_check(row: dict[str, Any]) -> str | None:
    """A stand-in CoA check: a valid run starts with a plan and ends with a final answer."""
    roles = [s["role"] for s in row["steps"]]
    if not roles or roles[0] != "plan":
        return "a CoA trajectory starts with a plan"
    if roles[-1] != "final_answer":
        return "a CoA trajectory ends with a final answer"
    return None


def bench_table(items: Sequence[tuple[str, str, Sequence[str]]], source: str = "bench") -> pa.Table:
    """A ``task.v1`` table from (task_id, question, gold answers)."""
    return TASK.from_rows(
        [
            {
                "task_id": tid,
                "source": source,
                "family": "web",
                "question": q,
                "gold_answers": list(golds),
                "test_cases": None,
                "source_index": i,
                "metadata": "{}",
            }
            for i, (tid, q, golds) in enumerate(items)
        ]
    )


def gaia_table(fixtures: Path) -> pa.Table:
    data = json.loads((fixtures / "gaia_dev_103.json").read_text())
    return bench_table(
        [(f"gaia_dev_103:{d['task_id']}", d["question"], [str(d["answer"])]) for d in data], "gaia_dev_103"
    )


def no_gate(**overrides: Any) -> CurateConfig:
    """A config with the great-expectations gate off (fast) and the given overrides merged in."""
    base: dict[str, Any] = {"gate": {"enabled": False}}
    for key, value in overrides.items():
        if isinstance(value, dict):
            base.setdefault(key, {}).update(value)
        else:
            base[key] = value
    return CurateConfig.model_validate(base)


class Sink:
    """Collects what the stage writes."""

    def __init__(self) -> None:
        self.curated: list[pa.Table] = []
        self.quarantine: list[pa.Table] = []

    def kept(self) -> list[dict[str, Any]]:
        return [r for t in self.curated for r in t.to_pylist()]

    def rejected(self) -> list[dict[str, Any]]:
        return [r for t in self.quarantine for r in t.to_pylist()]

    def reasons(self) -> dict[str, str]:
        """run_id -> reason."""
        return {r["row_key"]: r["reason"] for r in self.rejected()}


def run_curate(
    batches: Iterable[pa.Table],
    config: CurateConfig,
    out_dir: Path,
    *,
    benchmarks: dict[str, pa.Table] | None = None,
    previous: CurationStats | None = None,
) -> tuple[CurateResult, Sink]:
    sink = Sink()
    result = curate(
        batches,
        config,
        score,
        coa_check,
        benchmarks or {},
        previous,
        sink.curated.append,
        sink.quarantine.append,
        str(out_dir),
        source="test-input",
    )
    return result, sink


LONG_Q = (
    "In the annual report published by the Zorvak Historical Society in the spring of 1999, which "
    "founding member of the society is credited with drafting the original charter that was later "
    "displayed in the town hall museum?"
)


_VOCAB = (
    "amber",
    "basalt",
    "cedar",
    "delta",
    "ember",
    "falcon",
    "garnet",
    "harbor",
    "island",
    "jasper",
    "kettle",
    "lantern",
    "meadow",
    "nectar",
    "orchid",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "timber",
    "umber",
    "violet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
    "anchor",
    "bramble",
    "cobalt",
    "dune",
    "estuary",
    "fjord",
    "glacier",
    "heron",
    "indigo",
    "juniper",
    "kelp",
    "lichen",
    "marble",
    "nimbus",
    "oasis",
    "pewter",
    "quill",
    "reef",
    "sierra",
    "tundra",
    "urchin",
    "vapor",
    "wharf",
    "yeoman",
    "zinc",
    "acorn",
    "beacon",
    "canyon",
    "drizzle",
    "eagle",
    "fern",
    "grotto",
    "hollow",
    "iris",
    "jade",
    "knoll",
    "lagoon",
    "mesa",
    "nook",
    "otter",
    "prairie",
    "quarry",
    "ridge",
    "summit",
    "thicket",
)


def question(i: int, words: int = 14) -> str:
    """A question whose words are drawn for ``i`` alone, so two indices share almost nothing."""
    import random

    rnd = random.Random(i)
    return "Which " + " ".join(rnd.sample(_VOCAB, words)) + f" record number {i} holds?"
