"""The one canonical rendering of a trajectory, its inverse parser, and observation escaping.

Rendering: each segment becomes ``<tag>\\n{content}\\n</tag>\\n``, concatenated with nothing in
between. The same bytes are used for SFT text, RL rollout prefixes and evaluation prompts.

Live tags: a *live tag* is exactly ``<name>`` or ``</name>`` for a name in ``TAGS``. Only live
tags delimit segments; anything else (``<div>``, ``< answer>``, ``<ANSWER>``) is plain text.

Escaping: tool output may contain live tags (a web page printing ``</observation>``), which would
forge segments. :func:`render` therefore escapes every observation with
:func:`escape_observation` and :func:`parse` undoes it, so ``Segment.content`` always holds the raw
tool output. The escape inserts one backslash after the ``<`` of any tag-shaped string that
already has zero or more backslashes there (``<answer>`` → ``<\\answer>``, ``<\\answer>`` →
``<\\\\answer>``), which is reversible and leaves no live tag. Model-written segments are never
escaped: a live tag in their content is a ``nesting`` error.

Parsing: ``parse(text)`` (strict, the default) accepts exactly what :func:`render` produces, so
``parse(render(t)) == t``; the first violation raises :class:`FormatError` with its rule and
character position. ``parse(text, strict=False)`` also accepts model-style text: whitespace
between segments and around contents (contents are then stripped).

Parse rules: ``stray_text`` (text outside a segment), ``layout`` (missing canonical newline),
``unexpected_close``, ``nesting`` (a live tag inside a segment), ``unclosed``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

from coa.format.segments import TAGS, FormatError, Segment, Trajectory

_NAMES = "|".join(sorted(TAGS, key=len, reverse=True))
LIVE_TAG_RE = re.compile(rf"<(/?)({_NAMES})>")
_ESCAPABLE_RE = re.compile(rf"<(\\*)(/?)({_NAMES})>")
_ESCAPED_RE = re.compile(rf"<\\(\\*)(/?)({_NAMES})>")


def escape_observation(text: str) -> str:
    """Make tool output safe to place inside ``<observation>``: it will hold no live tag."""
    return _ESCAPABLE_RE.sub(lambda m: f"<\\{m[1]}{m[2]}{m[3]}>", text)


def unescape_observation(text: str) -> str:
    """Inverse of :func:`escape_observation`."""
    return _ESCAPED_RE.sub(lambda m: f"<{m[1]}{m[2]}{m[3]}>", text)


def render_segment(segment: Segment) -> str:
    content = segment.content
    if segment.tag == "observation":
        content = escape_observation(content)
    elif (m := LIVE_TAG_RE.search(content)) is not None:
        raise FormatError("nesting", f"live tag {m.group(0)!r} inside <{segment.tag}>")
    return f"<{segment.tag}>\n{content}\n</{segment.tag}>\n"


def render(trajectory: Trajectory) -> str:
    """The canonical text of a trajectory. Raises ``FormatError('nesting')`` for a tag in model text."""
    parts = []
    for i, segment in enumerate(trajectory.segments):
        try:
            parts.append(render_segment(segment))
        except FormatError as e:
            raise FormatError(e.rule, e.message, segment=i) from None
    return "".join(parts)


class Located(NamedTuple):
    """A parsed segment with its character span ``[start, end)`` in the text (end after the newline)."""

    segment: Segment
    start: int
    end: int


def scan(text: str, *, strict: bool = True) -> Iterator[Located]:
    """Yield the segments of ``text`` in order with their spans; raise on the first violation."""
    tags = list(LIVE_TAG_RE.finditer(text))
    pos, k = 0, 0
    while True:
        if not strict:
            pos = _skip_space(text, pos)
        if pos == len(text):
            return
        if k == len(tags) or tags[k].start() != pos:
            raise FormatError("stray_text", "text outside any segment", position=pos)
        opening = tags[k]
        if opening.group(1):
            raise FormatError("unexpected_close", f"{opening.group(0)} closes nothing", position=pos)
        name = opening.group(2)
        if k + 1 == len(tags):
            raise FormatError("unclosed", f"<{name}> is never closed", position=pos)
        closing = tags[k + 1]
        if closing.group(0) != f"</{name}>":
            raise FormatError("nesting", f"{closing.group(0)} inside <{name}>", position=closing.start())
        inner = text[opening.end() : closing.start()]
        end = closing.end()
        if strict:
            if len(inner) < 2 or inner[0] != "\n" or inner[-1] != "\n":
                raise FormatError("layout", f"<{name}> content must sit on its own lines", position=pos)
            if text[end : end + 1] != "\n":
                raise FormatError("layout", f"</{name}> must be followed by a newline", position=end)
            content = inner[1:-1]
            end += 1
        else:
            content = inner.strip()
            end += text[end : end + 1] == "\n"
        if name == "observation":
            content = unescape_observation(content)
        yield Located(Segment(name, content), pos, end)
        pos, k = end, k + 2


def parse(text: str, *, strict: bool = True) -> Trajectory:
    """Inverse of :func:`render`; raises :class:`FormatError` at the first violation."""
    return Trajectory(tuple(located.segment for located in scan(text, strict=strict)))


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos
