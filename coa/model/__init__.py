"""coa.model: the student models the pipeline trains.

* :mod:`~coa.model.tiny`: the tiny random-init Qwen2 student and its locally trained tokenizer
  (``coa model init``): :class:`TinyModelConfig`, :func:`init_model`;
* :mod:`~coa.model.config` / :mod:`~coa.model.step`: the student stage (a given model, or the tiny one
  built on the SFT texts as a ``model`` artifact).
"""

from coa.model.tiny import (
    CHATML_TEMPLATE,
    SPECIAL_TOKENS,
    TAG_TOKENS,
    TinyModelConfig,
    build_model,
    init_model,
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
    "sft_corpus",
    "train_tokenizer",
]
