"""coa.model: the student models the pipeline trains.

* :mod:`~coa.model.tiny`: the tiny random-init Qwen2 student and its locally trained tokenizer
  (``coa model init``): :class:`TinyModelConfig`, :func:`init_model`;
* :mod:`~coa.model.config` / :mod:`~coa.model.step`: the student stage (a given model, or the tiny one
  built on the SFT texts as a ``model`` artifact).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in (
        "CHATML_TEMPLATE",
        "SPECIAL_TOKENS",
        "TAG_TOKENS",
        "TinyModelConfig",
        "build_model",
        "init_model",
        "sft_corpus",
        "train_tokenizer",
    ):
        from coa.model import tiny

        return getattr(tiny, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
