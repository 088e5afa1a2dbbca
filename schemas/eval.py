"""``eval.v1``: one model run on one evaluation task: prediction, correctness, format, cost.

One row per (model, task, sample); ``sample_index`` (the sample) supports pass@k and maj@k. Token
counts (``completion_tokens``: what the model generated; ``total_tokens``: the one pass it reads and
writes) come from the model's own tokenizer and make accuracy comparable with token efficiency (the
CoA paper's claim); ``n_tool_calls`` counts tool calls; ``gold_in_observation`` is the leak guard's
flag.
"""

import pyarrow as pa

from schemas._contract import Column, Contract
from schemas.task import FAMILIES

EVAL = Contract(
    name="eval",
    version=1,
    doc="A model's run on an evaluation task, scored.",
    columns=(
        Column("eval_id", pa.string(), "Unique id: model fingerprint + task id + sample index."),
        Column("model", pa.string(), "Model name or path evaluated."),
        Column("task_id", pa.string(), "The task.v1 id."),
        Column("benchmark", pa.string(), "Benchmark / task set name (task.v1 source)."),
        Column("family", pa.string(), "Task family.", allowed=FAMILIES),
        Column("sample_index", pa.int32(), "Sample number for pass@k (0-based)."),
        Column("prediction", pa.string(), "Extracted final answer; null if none.", nullable=True),
        Column("correct", pa.bool_(), "Whether the prediction is correct."),
        Column("score", pa.float64(), "Score in [0, 1] (e.g. token F1 or judge)."),
        Column("format_valid", pa.bool_(), "Whether the output is a valid CoA trajectory for its variant."),
        Column(
            "format_error", pa.string(), "First format violation (rule and position), if any.", nullable=True
        ),
        Column("n_turns", pa.int32(), "Model generations in the run."),
        Column("n_tool_calls", pa.int32(), "Tool calls executed."),
        Column("prompt_tokens", pa.int64(), "Prompt tokens."),
        Column("completion_tokens", pa.int64(), "Generated tokens (observations excluded)."),
        Column(
            "total_tokens",
            pa.int64(),
            "Prompt + every completion token, observations included: the tokens of the single pass.",
        ),
        Column(
            "gold_in_observation",
            pa.bool_(),
            "Leak guard: a search or crawl observation of the run contained the task's gold answer.",
        ),
        Column("latency_s", pa.float64(), "Wall time of the run in seconds."),
        Column("text", pa.string(), "The full generated trajectory text."),
        Column("error", pa.string(), "Error that ended the run, if any.", nullable=True),
    ),
    unique=("eval_id",),
)
