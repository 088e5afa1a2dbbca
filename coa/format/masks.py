"""Loss masks from character spans: which tokens of a chat are trained.

The rule (``coa-format.md``, "Loss masks"): a token is trained iff it lies in the assistant
content or after it (``start >= content_start``: the content, the end-of-turn token and what the
template puts after it) and none of its characters lies inside an observation span. Prompt tokens,
and a token straddling the prompt/content boundary, are never trained. Spans come from the text,
not from token ids, so masks do not depend on how a tokenizer splits ``<observation>``.

* :func:`observation_spans` finds each ``<observation>`` … ``</observation>`` plus its trailing
  newline. Because tool output is escaped (:mod:`coa.format.codec`), every live ``<observation>``
  in the assistant content is a real one; an observation cut off by truncation runs to the end.
* :func:`check_observation_spans` checks spans against the text (each one exactly an observation
  segment, every observation covered): conversion checks the ``sft.v1`` column once, when it writes
  it; training then masks from the stored spans and never scans the text again.
* :func:`token_labels` maps spans to per-token booleans through an offset mapping.
* :func:`chat_text` renders system + user + assistant with a tokenizer's chat template and returns
  where the assistant content starts; :func:`label_chat` tokenizes a chat text and returns
  ``(input_ids, labels)`` with ``-100`` for untrained tokens (the Hugging Face convention), masking
  the spans it is given (the stored ``observation_spans`` of an example) or, without, those it finds.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from coa.format.segments import FormatError

IGNORE_INDEX = -100
_OPEN, _CLOSE = "<observation>", "</observation>"


def observation_spans(text: str, start: int = 0) -> list[tuple[int, int]]:
    """Spans ``[a, b)`` of the observation segments in ``text`` at or after ``start``."""
    spans = []
    a = text.find(_OPEN, start)
    while a != -1:
        close = text.find(_CLOSE, a + len(_OPEN))
        if close == -1:
            spans.append((a, len(text)))
            break
        b = close + len(_CLOSE)
        b += text.startswith("\n", b)
        spans.append((a, b))
        a = text.find(_OPEN, b)
    return spans


def check_observation_spans(text: str, spans: Sequence[tuple[int, int]]) -> None:
    """Raise ``FormatError`` (rule ``observation_spans``) unless ``spans`` are exactly the observation
    segments of a complete ``text``: in order, disjoint, each ``<observation>`` … ``</observation>`` plus
    its trailing newline, and every ``<observation>`` of the text covered by one.

    Read from the text by its own rule, not by :func:`observation_spans`, so it also checks that."""

    def fail(message: str) -> FormatError:
        return FormatError("observation_spans", f"{message}; spans {list(spans)}")

    end = 0
    for a, b in spans:
        if not end <= a < b <= len(text):
            raise fail(f"span ({a}, {b}) is out of order or outside the text (length {len(text)})")
        segment = text[a:b]
        inner = segment.removesuffix("\n")
        if not (inner.startswith(_OPEN) and inner.endswith(_CLOSE)):
            raise fail(f"span ({a}, {b}) is not one observation segment: {segment[:40]!r}")
        if inner.count(_OPEN) != 1 or inner.count(_CLOSE) != 1:
            raise fail(f"span ({a}, {b}) holds more than one observation")
        if inner == segment and text.startswith("\n", b):
            raise fail(f"span ({a}, {b}) leaves out the newline after its observation")
        end = b
    if text.count(_OPEN) != len(spans):
        raise fail(f"the text has {text.count(_OPEN)} observations, the spans {len(spans)}")


def token_labels(
    offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]], content_start: int
) -> list[bool]:
    """Per token: trained or not. ``spans`` must be sorted and disjoint (as :func:`observation_spans`)."""
    span_starts = [a for a, _ in spans]
    labels = []
    for s, e in offsets:
        j = bisect.bisect_right(span_starts, s if s == e else e - 1) - 1  # last span starting in the token
        inside = j >= 0 and spans[j][1] > s
        labels.append(s >= content_start and not inside)
    return labels


def chat_text(tokenizer: Any, system: str, question: str, content: str) -> tuple[str, int]:
    """The full chat text (via ``tokenizer.apply_chat_template``) and the assistant content's offset."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(
        [*messages, {"role": "assistant", "content": content}], tokenize=False
    )
    start = len(prompt)
    if not full.startswith(prompt) or full[start : start + len(content)] != content:
        raise FormatError("chat_template", "the chat template does not keep the assistant content verbatim")
    return full, start


def label_chat(
    tokenizer: Any, text: str, content_start: int, spans: Sequence[tuple[int, int]] | None = None
) -> tuple[list[int], list[int]]:
    """Tokenize a chat text (a fast tokenizer; special tokens written in the text) and label it.

    ``spans`` are the observation spans in the assistant content (offsets from ``content_start``, as
    ``sft.v1`` stores them); without them, the spans of the text (:func:`observation_spans`)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = enc["input_ids"]
    if spans is None:
        masked = observation_spans(text, content_start)
    else:
        masked = [(content_start + a, content_start + b) for a, b in spans]
    trained = token_labels(enc["offset_mapping"], masked, content_start)
    return ids, [t if keep else IGNORE_INDEX for t, keep in zip(ids, trained, strict=True)]
