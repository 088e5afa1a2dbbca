"""The hook behind ``coa format check --variant V FILE``: validate rows of rendered trajectories.

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

from coa.format.grammar import grammar, validate
from coa.format.segments import FormatError


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
