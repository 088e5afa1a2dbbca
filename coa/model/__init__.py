"""coa.model: the student models the pipeline trains.

* :mod:`~coa.model.tiny`: the tiny random-init Qwen2 student and its locally trained tokenizer
  (``coa model init``): :class:`TinyModelConfig`, :func:`init_model`, :func:`init_model_artifact`.
"""

from coa.model.tiny import (
    CHATML_TEMPLATE,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    TinyModelConfig,
    build_model,
    init_model,
    init_model_artifact,
    sft_corpus,
    train_tokenizer,
)

__all__ = [
    "CHATML_TEMPLATE",
    "SPECIAL_TOKENS",
    "TAG_TOKENS",
    "TinyModelConfig",
    "build_model",
    "init_model",
    "init_model_artifact",
    "sft_corpus",
    "train_tokenizer",
]
