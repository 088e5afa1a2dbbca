"""check_rows: the hook behind ``coa format check``."""

from __future__ import annotations

import pytest

from coa.format import check_rows, render

from .samples import MHQA, WEB, traj


def test_check_rows() -> None:
    rows = [
        {"id": "good", "text": render(traj(WEB))},
        {"id": "wrong-variant", "text": render(traj(MHQA))},
        {"id": "garbled", "text": "<think>\nx\n</think>\nstray"},
        {"id": "no-text"},
    ]
    results = list(check_rows(rows, "web"))
    assert [r["id"] for r in results] == ["good", "wrong-variant", "garbled", "no-text"]
    assert [r["ok"] for r in results] == [True, False, False, False]
    assert results[0]["error"] is None
    assert results[1]["error"]["rule"] == "tag_not_allowed" and results[1]["error"]["segment"] == 3
    assert results[2]["error"] == {"rule": "stray_text", "message": "text outside any segment",
                                   "position": 19, "segment": None}  # fmt: skip
    assert results[3]["error"]["rule"] == "bad_row"


def test_check_rows_lenient_and_lazy() -> None:
    text = "".join(f"<{t}>{c}</{t}>" for t, c in WEB)
    assert next(check_rows([{"id": 1, "text": text}], "web", strict=False))["ok"]
    with pytest.raises(ValueError, match="unknown variant"):
        check_rows([], "nope")  # raised at the call, before iterating
