"""``task_stats.v1``: how many teacher runs of each task curation saw, and how many were correct.

One row per task id of the raw runs (quarantined runs included; a run whose ``correct`` is null
counts as wrong), sorted by ``task_id``. The convert step reads it for RL difficulty selection
(``teacher_pass_rate = correct / runs``).
"""

import pyarrow as pa

from schemas._contract import Column, Contract

TASK_STATS = Contract(
    name="task_stats",
    version=1,
    doc="Teacher runs and correct runs per task, as curation counted them.",
    columns=(
        Column("task_id", pa.string(), "The task.v1 id."),
        Column("runs", pa.int64(), "Raw teacher runs of the task."),
        Column("correct", pa.int64(), "Those that were correct."),
    ),
    unique=("task_id",),
)
