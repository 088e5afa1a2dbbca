"""Token counting for limiters, budgets and replies without ``usage``.

A :data:`TokenCounter` is any ``Callable[[str], int]``. The default, :func:`approx_token_count`, is
``ceil(utf8_bytes / 4)``: about right for English prose with BPE vocabularies (~4 characters per
token), closer than a character count for non-Latin scripts (2-3 bytes per character, often one
token each), and always cheap. Chat framing adds :data:`MESSAGE_OVERHEAD_TOKENS` per message and
:data:`REPLY_PRIMING_TOKENS` per request (the OpenAI chat-format convention).

For exact counts plug in a Hugging Face tokenizer with :func:`hf_token_counter` (or set
``EndpointConfig.tokenizer``); it is loaded lazily on first use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

TokenCounter = Callable[[str], int]

BYTES_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 3


def approx_token_count(text: str) -> int:
    """Approximate token count: one token per 4 UTF-8 bytes, rounded up (0 for empty text)."""
    if not text:
        return 0
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def message_text(content: Any) -> str:
    """The text of a chat message's ``content`` (a string, None, or a list of typed parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                parts.append(str(part.get("text") or ""))
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return str(content)


def estimate_prompt_tokens(messages: Sequence[Mapping[str, Any]], counter: TokenCounter) -> int:
    """Estimated prompt tokens of a chat request (contents, names, tool calls, framing)."""
    total = REPLY_PRIMING_TOKENS
    for m in messages:
        total += MESSAGE_OVERHEAD_TOKENS + counter(message_text(m.get("content")))
        if m.get("name"):
            total += counter(str(m["name"]))
        if m.get("tool_calls"):
            total += counter(str(m["tool_calls"]))
    return total


def hf_token_counter(tokenizer: Any) -> TokenCounter:
    """A counter backed by a Hugging Face tokenizer: a name/path (loaded lazily) or a loaded object."""

    @functools.cache
    def _load() -> Any:
        if not isinstance(tokenizer, str):
            return tokenizer
        from transformers import AutoTokenizer  # lazy: heavy, only when a tokenizer is configured

        return AutoTokenizer.from_pretrained(tokenizer)

    def count(text: str) -> int:
        if not text:
            return 0
        return len(_load().encode(text, add_special_tokens=False))

    return count
