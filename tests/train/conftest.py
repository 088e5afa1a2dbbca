"""A tiny model (hidden 32, 2 layers) built once per session, and small sft.v1 tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from coa.model import TinyModelConfig, init_model, sft_corpus

from .rows import arith_rows

TINY = TinyModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)


@pytest.fixture(scope="session")
def sft_rows() -> pa.Table:
    return arith_rows(64, seed=1)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tokenizer trained on the arithmetic chats, random model; read-only for the tests."""
    return init_model(sft_corpus(arith_rows(300, seed=0)), TINY, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tokenizer(tiny_model: Path) -> object:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)
