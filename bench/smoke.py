"""What a bench's ``--quick`` size builds on the spot when it is not given a demo run's artifacts.

A tiny random student (a tokenizer trained on arithmetic chats, the Qwen2 shape of the test suite's)
and small ``sft.v1`` tables of arithmetic solved with code (``tests/train/rows.py``): enough for a
bench's machinery to run end to end in seconds; its figures then measure the machinery, not a demo.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from coa.model import TinyModelConfig, init_model, sft_corpus
from tests.train.rows import arith_rows

TINY = TinyModelConfig(
    vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128
)


def sft_table(rows: int = 64, seed: int = 1) -> pa.Table:
    """``rows`` sft.v1 examples (family ``math``): arithmetic solved with code."""
    return arith_rows(rows, seed=seed)


def tiny_student(folder: str | Path) -> Path:
    """A tiny random student with its own tokenizer, written to ``folder``."""
    return init_model(sft_corpus(arith_rows(200, seed=0)), TINY, Path(folder))


def heldout_tasks(folder: str | Path, n: int = 4) -> Path:
    """A tasks folder holding ``heldout.parquet``: ``n`` held-out arithmetic tasks (the demo's shape)."""
    import pyarrow.parquet as pq

    from coa import synthetic

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    table = synthetic.generate("arithmetic", n, 0, "heldout", arithmetic_templates=("chain",))
    pq.write_table(table, out / "heldout.parquet")
    return out
