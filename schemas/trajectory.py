"""``trajectory.v1``: one multi-agent teacher run on one task, recorded faithfully step by step.

A row is a run; ``steps`` holds every agent step in order: which agent in which role wrote what,
which tool it called with which arguments, what the tool returned, tokens, latency and errors. The
CoA conversion reads only this table, so everything it needs (plans, every agent's reasoning,
reflections with their grades, verification scores) is recorded here.
"""

import pyarrow as pa

from schemas._contract import Column, Contract
from schemas.task import FAMILIES

TS = pa.timestamp("us", tz="UTC")

STEP_ROLES = (
    "plan",  # manager's (re)plan
    "think",  # an agent's reasoning before acting
    "tool_call",  # a tool invocation (tool_name, tool_args) with its observation
    "reflection",  # reflection step with graded criteria
    "verification",  # suggested answer + double-check score
    "final_answer",  # the run's final answer
    "delegate",  # manager hands a sub-task to another agent
    "error",  # a step that failed before producing output (error is set)
)

STEP = pa.struct(
    [
        pa.field("index", pa.int32(), nullable=False),
        pa.field("agent", pa.string(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("text", pa.string()),
        pa.field("tool_name", pa.string()),
        pa.field("tool_args", pa.string()),
        pa.field("observation", pa.string()),
        pa.field("fields", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("latency_s", pa.float64()),
        pa.field("error", pa.string()),
        pa.field("started_at", TS),
    ]
)
"""One step: ``agent`` (manager, search_agent, code_agent, reflector, verifier), ``role`` (one of
STEP_ROLES), ``text`` (the model's output), ``tool_name``/``tool_args`` (JSON) and ``observation``
for tool calls, ``fields`` (JSON of parsed fields, e.g. reflection grades or a double-check score),
token counts of the model call, latency, ``error`` (kind: message) and start time."""

RUN_STATUSES = ("completed", "error", "step_limit", "time_limit", "budget_exhausted")

TRAJECTORY = Contract(
    name="trajectory",
    version=1,
    doc="One multi-agent teacher run on one task, with every step.",
    columns=(
        Column("run_id", pa.string(), "Unique id of the run (task id + teacher fingerprint + sample)."),
        Column("task_id", pa.string(), "The task.v1 id this run solved."),
        Column("family", pa.string(), "Task family.", allowed=FAMILIES),
        Column("question", pa.string(), "The question as given to the teacher."),
        Column("gold_answers", pa.list_(pa.string()), "Gold answers copied from the task (for scoring)."),
        Column("teacher", pa.string(), "Teacher name, e.g. 'oagents-style/gpt-4.1' or 'offline-rule-based'."),
        Column(
            "teacher_config", pa.string(), "Resolved teacher config as JSON (models, limits; never secrets)."
        ),
        Column(
            "sample_index", pa.int32(), "Which of several samples of the same task this run is (0-based)."
        ),
        Column("steps", pa.list_(STEP), "Every step of the run, in order."),
        Column(
            "final_answer",
            pa.string(),
            "The run's final answer; null if it ended without one.",
            nullable=True,
        ),
        Column(
            "correct",
            pa.bool_(),
            "Whether the final answer is correct; null if not scored yet.",
            nullable=True,
        ),
        Column("status", pa.string(), "How the run ended.", allowed=RUN_STATUSES),
        Column("error", pa.string(), "Error that ended the run (kind: message), if any.", nullable=True),
        Column("n_steps", pa.int32(), "Number of steps."),
        Column("n_tool_calls", pa.int32(), "Number of tool calls."),
        Column("prompt_tokens", pa.int64(), "Total prompt tokens over all model calls."),
        Column("completion_tokens", pa.int64(), "Total completion tokens over all model calls."),
        Column(
            "cost_usd", pa.float64(), "Estimated cost of the model calls in USD, if priced.", nullable=True
        ),
        Column("latency_s", pa.float64(), "Wall time of the run in seconds."),
        Column("started_at", TS, "When the run started."),
        Column("finished_at", TS, "When the run ended."),
        Column(
            "coa_variant",
            pa.string(),
            "CoA grammar variant curate's check converted the run to; null before curation.",
            nullable=True,
        ),
        Column(
            "coa_text",
            pa.string(),
            "The run as CoA assistant text, as curate's check rendered it (convert reuses it instead of "
            "converting the run again); null before curation.",
            nullable=True,
        ),
    ),
    unique=("run_id",),
)
