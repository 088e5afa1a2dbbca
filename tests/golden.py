"""Golden files: deterministic outputs compared with a file under ``tests/golden/``.

Run with ``COA_UPDATE_GOLDEN=1`` (``make golden``) to rewrite them after an intended change, then
review the diff like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "golden"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
UPDATE = os.environ.get("COA_UPDATE_GOLDEN") == "1"


def check(name: str, value: Any) -> None:
    """Assert ``value`` (JSON-able) equals ``tests/golden/<name>``; rewrite it when updating."""
    path = GOLDEN / name
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.is_file():
        raise AssertionError(f"no golden file {path}; create it with COA_UPDATE_GOLDEN=1 (make golden)")
    expected = path.read_text()
    assert text == expected, (
        f"{name} differs from its golden file; if the change is intended, rerun with COA_UPDATE_GOLDEN=1 "
        "(make golden) and review the diff"
    )
