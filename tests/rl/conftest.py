"""A tiny random Qwen2 with the CoA tokenizer (tags are single tokens), built once for the RL tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coa.model import TinyModelConfig, init_model, sft_corpus
from coa.rollout import Codec
from tests.serve.conftest import ServeProcess
from tests.train.rows import arith_rows

TINY = TinyModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(sft_corpus(arith_rows(200, seed=0)), TINY, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def codec(tiny_model: Path) -> Codec:
    return Codec.from_pretrained(str(tiny_model))


@pytest.fixture(scope="module")
def serve(tiny_model: Path) -> Iterator[ServeProcess]:
    """``python -m coa.serve`` on the tiny model (one per test module), as ``student``."""
    server = ServeProcess(tiny_model, "--served-model-name", "student")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
