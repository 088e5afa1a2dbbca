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


def test_check_format_is_the_check_of_one_model_output() -> None:
    """Evaluation, RL rewards and sampling all check a model's text with ``check_format``."""
    from coa.format import check_format

    assert check_format(render(traj(WEB)), "web") == (True, None)
    ok, error = check_format(render(traj(MHQA)), "web")
    assert not ok and error is not None and error.startswith("tag_not_allowed: ")
    ok, error = check_format("<think>\nx\n</think>\nstray", "web")
    assert not ok and error is not None and error.startswith("stray_text: ")
    # an error the rollout engine already found (a forged observation) wins over a valid text
    assert check_format(render(traj(WEB)), "web", "forged_observation: x") == (False, "forged_observation: x")


def test_variant_of_a_family() -> None:
    from coa.format.from_run import variant_of

    assert variant_of("math", {}) == "code_math" and variant_of("mhqa", {}) == "web"
    assert variant_of("mhqa", {"mhqa": "mhqa"}) == "mhqa" and variant_of("web", {"web": "auto"}) == "web"
