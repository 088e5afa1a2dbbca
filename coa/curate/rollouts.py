"""RL rollouts as curation input: correct, format-valid ``rollout.v1`` rows → ``trajectory.v1`` runs.

Rejection sampling for the next SFT round: the curate step accepts an RL artifact's ``rollouts``
table where it accepts a collection's ``trajectories``. :class:`RolloutRuns` turns each batch of
rollouts into the runs curation reads, and the rest of curation is unchanged: rescoring (QA/math by
rule, code by the task's tests), the filters, decontamination, the dedup (identical texts of one
prompt in several groups or steps are exact duplicates; ``dedup.max_per_task`` caps the samples
kept per task), the gate and the report.

**Which rows.** Only rows with ``correct`` and ``format_valid`` (a forged observation is never
format-valid); kept and dropped groups alike (dynamic sampling drops the groups a policy already
solves every time, which are good SFT examples). The counts go in the curate artifact's lineage.

**Native CoA runs.** The policy wrote CoA text itself, so nothing is mapped from teacher agents:
the run holds one step per segment of the text, its tag in ``fields`` (``{"coa_tag": tag}``), a
tool's observation in that tool call's step (role ``tool_call``, its argument in ``tool_args``
too, for curation's repeated-call check). Roles and agents follow the tag (``think``/``plan``/
``answer`` → manager, tools → search or code agent, ``reflection`` → reflector,
``suggested_answer``/``double_check`` → verifier), so the gate's role and agent sets hold.
:func:`coa.format.from_run.to_coa` reads such a run back to exactly its segments under the
variant recorded in ``teacher_config``, and convert renders them canonically: the SFT assistant
text is the rollout's text without its end-of-turn marker (``render(parse(t)) == t``), and its
observations are masked like any other example's.

Fields a rollout does not have: ``latency_s`` is 0 and both timestamps are the RL artifact's
commit time; ``prompt_tokens`` / ``completion_tokens`` are the rollout's prompt ids and the
tokens the policy generated.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from coa.errors import UserError
from coa.format import FormatError, Trajectory, parse
from coa.format.codec import LIVE_TAG_RE, scan
from coa.format.from_run import NATIVE_TAG, TOOL_ARG
from schemas.trajectory import TRAJECTORY

TEACHER = "rl-policy"
"""The ``teacher`` of a run made from a rollout (``teacher_config`` names the RL artifact)."""

ROLE_OF = {
    "think": ("think", "manager"),
    "plan": ("plan", "manager"),
    "answer": ("final_answer", "manager"),
    "reflection": ("reflection", "reflector"),
    "suggested_answer": ("verification", "verifier"),
    "double_check": ("verification", "verifier"),
    "code": ("tool_call", "code_agent"),
}
"""Segment tag → (step role, agent); other tool tags are the search agent's tool calls."""


def coa_text(text: str) -> str | None:
    """``text`` up to the end of its last segment (what follows, the end-of-turn marker, dropped);
    None when it is not canonical CoA text followed by no more than such a marker."""
    end = 0
    try:
        for located in scan(text):
            end = located.end
    except FormatError as e:
        if e.rule != "stray_text" or e.position != end or LIVE_TAG_RE.search(text, end):
            return None
    return text[:end] if end else None


def native_steps(trajectory: Trajectory, at: dt.datetime) -> list[dict[str, Any]]:
    """The ``trajectory.v1`` steps of a native CoA run: one per segment, observations in their call's."""
    steps: list[dict[str, Any]] = []
    for segment in trajectory.segments:
        if segment.tag == "observation":
            if not steps or steps[-1]["role"] != "tool_call":
                raise FormatError("observation_without_tool", "an observation not after a tool call")
            steps[-1]["observation"] = segment.content
            continue
        role, agent = ROLE_OF.get(segment.tag, ("tool_call", "search_agent"))
        tool = segment.tag if role == "tool_call" else None
        steps.append(
            {
                "index": len(steps),
                "agent": agent,
                "role": role,
                "text": segment.content,
                "tool_name": tool,
                "tool_args": json.dumps({TOOL_ARG.get(segment.tag, "argument"): segment.content})
                if tool
                else None,
                "observation": None,
                "fields": json.dumps({NATIVE_TAG: segment.tag}),
                "prompt_tokens": None,
                "completion_tokens": None,
                "latency_s": None,
                "error": None,
                "started_at": at,
            }
        )
    return steps


class RolloutRuns:
    """Turns ``rollout.v1`` batches into ``trajectory.v1`` runs of the selected rows; counts as it goes.

    ``tasks`` maps a task id to its ``task.v1`` row (family, question, gold answers); ``source`` is
    the RL (or sampling) artifact's URI and ``at`` its commit time; ``teacher`` labels the runs
    (``rl-policy``, or ``student-r<round>`` for a sampling step's rows, whose ``round`` also goes in
    ``teacher_config``).
    """

    def __init__(
        self,
        tasks: Mapping[str, Mapping[str, Any]],
        source: str,
        at: dt.datetime,
        teacher: str = TEACHER,
        round_: int | None = None,
    ) -> None:
        self.tasks, self.source, self.at = tasks, source, at
        self.teacher, self.round = teacher, round_
        self.tag = hashlib.sha256(source.encode()).hexdigest()[:10]
        self.counts = {"rollouts": 0, "incorrect": 0, "format_invalid": 0, "not_canonical": 0, "selected": 0}

    def __call__(self, batch: pa.Table) -> pa.Table:
        runs = []
        for row in batch.to_pylist():
            self.counts["rollouts"] += 1
            if not row["format_valid"]:
                self.counts["format_invalid"] += 1
                continue
            if not row["correct"]:
                self.counts["incorrect"] += 1
                continue
            run = self.run(row)
            if run is None:
                self.counts["not_canonical"] += 1
                continue
            runs.append(run)
        self.counts["selected"] += len(runs)
        return TRAJECTORY.from_rows(runs)

    def run(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The run of one selected rollout row; None when its text is not canonical CoA text (a row
        marked format-valid by an older scorer)."""
        task = self.tasks.get(row["task_id"])
        if task is None:
            raise UserError(
                f"rollout of task {row['task_id']!r} ({self.source}): no such task in the curate step's "
                "tasks input; give the task.v1 artifact the RL prompts were converted from"
            )
        text = coa_text(row["text"])
        if text is None:
            return None
        steps = native_steps(parse(text), self.at)
        answer = next((s["text"] for s in steps if s["role"] == "final_answer"), None)
        config = {
            "source": "rollout.v1",
            "artifact": self.source,
            "prompt_id": row["prompt_id"],
            "variant": row.get("variant"),
            "step": row["step"],
            "group": row["group"],
            "sample": row["sample"],
            "reward": row["reward"],
        } | ({"round": self.round} if self.round is not None else {})
        return {
            "run_id": f"{row['task_id']}#rl-{self.tag}-s{row['step']}-g{row['group']}-{row['sample']}",
            "task_id": row["task_id"],
            "family": task["family"],
            "question": task["question"],
            "gold_answers": list(task["gold_answers"] or []),
            "teacher": self.teacher,
            "teacher_config": json.dumps(config, sort_keys=True),
            "sample_index": row["sample"],
            "steps": steps,
            "final_answer": answer,
            "correct": bool(row["correct"]),
            "status": "completed",
            "error": None,
            "n_steps": len(steps),
            "n_tool_calls": sum(s["role"] == "tool_call" for s in steps),
            "prompt_tokens": len(row["prompt_ids"]),
            "completion_tokens": row["tokens"],
            "cost_usd": None,
            "latency_s": 0.0,
            "started_at": self.at,
            "finished_at": self.at,
        }
