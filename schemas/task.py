"""``task.v1``: one task a teacher or a student must solve (a question with its gold answers).

Produced by ``coa tasks import`` (AFM benchmark files, plain JSONL/Parquet, local HF datasets) and,
later, by the synthetic task families. One row per task; ``task_id`` is unique within an artifact.
"""

import pyarrow as pa

from schemas._contract import Column, Contract

FAMILIES = ("web", "mhqa", "math", "code")

TEST_CASES = pa.struct(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("stdin", pa.list_(pa.string())),
        pa.field("expected_output", pa.list_(pa.string())),
        pa.field("functional", pa.string()),
        pa.field("fn_name", pa.string()),
        pa.field("starter_code", pa.string()),
    ]
)
"""Code test cases: ``kind`` is ``stdin`` (run the program on each ``stdin``, compare with
``expected_output``) or ``functional`` (append the ``functional`` assert snippet to the program)."""

TASK = Contract(
    name="task",
    version=1,
    doc="A task to solve: question, gold answers, and for code tasks the tests a solution must pass.",
    columns=(
        Column("task_id", pa.string(), "Unique id: '<source>:<native id or row number>'."),
        Column(
            "source",
            pa.string(),
            "Task set the row came from (file stem or dataset name), e.g. 'gaia_dev_103'.",
        ),
        Column("family", pa.string(), "Task family, which fixes scoring and CoA variant.", allowed=FAMILIES),
        Column("question", pa.string(), "The bare question, with any embedded system prompt removed."),
        Column(
            "gold_answers",
            pa.list_(pa.string()),
            "Accepted answers (any one is correct); empty for code tasks, which are scored by tests.",
        ),
        Column("test_cases", TEST_CASES, "Tests for code tasks; null for other families.", nullable=True),
        Column("source_index", pa.int64(), "Row number of the task in its source file (0-based)."),
        Column("metadata", pa.string(), "JSON object of source-specific extras (level, url, difficulty, …)."),
    ),
    unique=("task_id",),
)
