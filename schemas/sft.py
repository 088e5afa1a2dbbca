"""``sft.v1``: one supervised fine-tuning example in the CoA single-model format.

``messages`` is TRL's conversational layout (system, user, one assistant message holding the whole
CoA trajectory); ``observation_spans`` are the character spans of the observation segments inside
the assistant content, so training masks them without parsing the text again.
"""

import pyarrow as pa

from schemas._contract import Column, Contract
from schemas.task import FAMILIES

MESSAGE = pa.struct(
    [pa.field("role", pa.string(), nullable=False), pa.field("content", pa.string(), nullable=False)]
)
SPAN = pa.struct([pa.field("start", pa.int32(), nullable=False), pa.field("end", pa.int32(), nullable=False)])

VARIANTS = ("web", "mhqa", "code_math", "afm")

SFT = Contract(
    name="sft",
    version=1,
    doc="A CoA SFT example: chat messages plus the observation spans to mask from the loss.",
    columns=(
        Column("example_id", pa.string(), "Unique id of the example."),
        Column("task_id", pa.string(), "The task.v1 id."),
        Column("run_id", pa.string(), "The trajectory.v1 run it was converted from."),
        Column("family", pa.string(), "Task family.", allowed=FAMILIES),
        Column("variant", pa.string(), "CoA grammar variant the trajectory satisfies.", allowed=VARIANTS),
        Column("messages", pa.list_(MESSAGE), "Conversation: system, user, then one assistant message."),
        Column(
            "observation_spans",
            pa.list_(SPAN),
            "Character spans [start, end) of observation segments in the assistant content.",
        ),
        Column("n_tokens", pa.int32(), "Length of the rendered conversation under `tokenizer`."),
        Column("tokenizer", pa.string(), "Tokenizer used for n_tokens (name or path)."),
        Column("prompt_version", pa.string(), "Version of the system prompt used."),
    ),
    unique=("example_id",),
)
