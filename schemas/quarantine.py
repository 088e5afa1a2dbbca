"""``quarantine.v1``: rows a stage could not use, each with the reason, never silently dropped.

Every stage that rejects input writes its rejects here, with the original row as JSON, so a user can
see what was lost and why, fix the source, and rerun.
"""

import pyarrow as pa

from schemas._contract import Column, Contract

QUARANTINE = Contract(
    name="quarantine",
    version=1,
    doc="Rejected rows with the stage, the reason and the original payload.",
    columns=(
        Column("stage", pa.string(), "Stage that rejected the row, e.g. 'tasks.import', 'curate'."),
        Column("source", pa.string(), "Input the row came from (file path, artifact URI or task set)."),
        Column(
            "row_key", pa.string(), "Best identifier of the row: its id if it has one, else its row number."
        ),
        Column(
            "reason", pa.string(), "Short machine-readable reason code, e.g. 'missing_question', 'dedup'."
        ),
        Column("detail", pa.string(), "Human-readable explanation of the reason."),
        Column("payload", pa.string(), "The original row as JSON (truncated to 100k characters)."),
        Column("quarantined_at", pa.timestamp("us", tz="UTC"), "When the row was rejected."),
    ),
)
