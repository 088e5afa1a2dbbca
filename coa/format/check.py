"""Checking text against a variant's grammar: one model output (:func:`check_format`), or the rows
behind ``coa format check --variant V FILE`` (:func:`check_rows`).

:func:`check_format` is the format check of evaluation, RL rewards and sampling: whether a model's
text is a complete, valid trajectory of its variant, else the first violation as ``"rule: message"``.

:func:`check_rows` takes rows (mappings with ``id`` and ``text``, e.g. the lines of a JSONL file)
and yields one result per row, in order::

    {"id": <row id>, "ok": True,  "error": None}
    {"id": <row id>, "ok": False, "error": {"rule": ..., "message": ..., "position": ..., "segment": ...}}

``position`` is a character offset in ``text`` and ``segment`` a segment index (either may be
``None``). A row without a string ``text`` fails with rule ``bad_row``. ``strict=False`` accepts
non-canonical whitespace (model output); the default checks the canonical rendering.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from coa.format.codec import parse
from coa.format.grammar import grammar, validate
from coa.format.segments import FormatError


def check_format(text: str, variant: str, format_error: str | None = None) -> tuple[bool, str | None]:
    """Whether ``text`` is a complete, valid trajectory of ``variant``, else the first violation.

    ``format_error`` is one the rollout engine already found (a forged observation…): it wins."""
    if format_error is not None:
        return False, format_error
    try:
        result = validate(parse(text), variant)
    except FormatError as e:
        return False, f"{e.rule}: {e}"
    if not result.ok:
        assert result.error is not None
        return False, f"{result.error.rule}: {result.error.message}"
    return True, None


def check_rows(
    rows: Iterable[Mapping[str, Any]], variant: str, *, strict: bool = True
) -> Iterator[dict[str, Any]]:
    grammar(variant)  # an unknown variant raises ValueError here, before any row is read
    return _check(rows, variant, strict)


def _check(rows: Iterable[Mapping[str, Any]], variant: str, strict: bool) -> Iterator[dict[str, Any]]:
    for row in rows:
        text = row.get("text")
        if not isinstance(text, str):
            error: FormatError | None = FormatError("bad_row", "the row has no string 'text'")
        else:
            error = validate(text, variant, strict=strict).error
        yield {"id": row.get("id"), "ok": error is None, "error": error.as_dict() if error else None}
