"""``eval.v1``: one model run on one evaluation task: prediction, correctness, format, cost.

One row per (model, task, sample); ``sample_index`` (the sample) supports pass@k and maj@k. Token
counts (``completion_tokens``: what the model generated; ``total_tokens``: the one pass it reads and
writes) come from the model's own tokenizer and make accuracy comparable with token efficiency (the
CoA paper's claim); ``n_tool_calls`` counts tool calls; ``gold_in_observation`` is the leak guard's
flag.

Scoring: ``correct`` / ``score`` come from the benchmark's own scorer (:mod:`coa.scoring.benchmarks`:
GAIA's rule, BrowseComp's and HLE's graders, LiveCodeBench's tests, math-verify as AFM uses it,
AFM's first-answer EM for NQ/HotpotQA, else the project's rule for the family), named per row in
``scorer`` and ``scorer_version`` with ``score_detail`` saying what decided. These three columns were
added after the first tables were written: they are nullable, and a table written before them reads
with nulls there (the contract stays ``eval.v1``).
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
        Column(
            "scorer",
            pa.string(),
            "Name of the scorer that decided `correct` (coa.scoring.benchmarks.SCORERS, e.g. 'gaia'); "
            "null in tables written before it was recorded.",
            nullable=True,
        ),
        Column("scorer_version", pa.string(), "Version of that scorer; null in older tables.", nullable=True),
        Column(
            "score_detail",
            pa.string(),
            "What decided the verdict (the rule branch, the matched gold, the grader's reason); null in "
            "older tables.",
            nullable=True,
        ),
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
