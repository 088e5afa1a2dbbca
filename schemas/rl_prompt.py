"""``rl_prompt.v1``: one prompt for agentic RL, with what the reward needs and its difficulty.

``group_index`` is the GRPO group key (AFM's ``extra_info.index``): unique per prompt, so groups
never merge. ``teacher_pass_rate`` supports "hard but solvable" selection.
"""

import pyarrow as pa

from schemas._contract import Column, Contract
from schemas.sft import MESSAGE, VARIANTS
from schemas.task import FAMILIES, TEST_CASES

RL_PROMPT = Contract(
    name="rl_prompt",
    version=1,
    doc="An RL prompt: chat prompt, gold answers or tests, family, variant, group index, difficulty.",
    columns=(
        Column("prompt_id", pa.string(), "Unique id of the prompt."),
        Column("task_id", pa.string(), "The task.v1 id."),
        Column("family", pa.string(), "Task family (selects the reward).", allowed=FAMILIES),
        Column("variant", pa.string(), "CoA grammar variant expected from the policy.", allowed=VARIANTS),
        Column("prompt", pa.list_(MESSAGE), "Chat prompt: system + user messages."),
        Column("gold_answers", pa.list_(pa.string()), "Accepted answers (empty for code tasks)."),
        Column("test_cases", TEST_CASES, "Tests for code tasks; null otherwise.", nullable=True),
        Column("group_index", pa.int64(), "GRPO group key, unique per prompt."),
        Column("teacher_pass_rate", pa.float64(), "Share of teacher runs that were correct.", nullable=True),
        Column("n_teacher_runs", pa.int32(), "Number of teacher runs behind teacher_pass_rate."),
    ),
    unique=("prompt_id", "group_index"),
)
