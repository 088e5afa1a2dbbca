"""Task-set import, quarantine: what a rejected row becomes in ``quarantine.v1``.

A row that cannot be used is never dropped: it is kept (stage ``tasks.import``) with its reason code,
a detail and its original payload (at most ``PAYLOAD_LIMIT`` characters), with anything UTF-8 cannot
hold (lone surrogates) written as escapes, so the quarantine table itself always writes.
"""

from __future__ import annotations

from typing import Any

from coa.tasksets.containers import RawRow, dumps

STAGE = "tasks.import"
PAYLOAD_LIMIT = 100_000


def is_utf8(value: Any) -> bool:
    try:
        dumps(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot hold (lone surrogates) written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def payload_text(raw: RawRow) -> str:
    text = raw.raw if raw.row is None and raw.raw is not None else dumps(raw.row)
    return safe_text(text[:PAYLOAD_LIMIT])
