"""The great-expectations gate (Data Docs, named failures) and the data-quality report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coa.curate.config import CurateConfig
from coa.curate.core import CurateGateError
from coa.curate.report import headline_markdown, render_report
from coa.curate.stats import CurationStats, ToolStats
from tests.curate.rows import question, run, run_curate, table


def _runs(n: int, wrong_every: int = 0) -> list[dict]:
    rows = []
    for i in range(n):
        wrong = wrong_every and i % wrong_every == 0
        calls: list[tuple[str, str, str, str | None]] = [
            ("web_search", f"q{i}", f"result {i} " * (i + 1), None)
        ]
        if i % 4 == 0:
            calls.append(("crawl_page", f"http://x/{i}", "Error: 404", "HTTPError: 404"))
        rows.append(run(f"r{i}", question(i), "Wrong" if wrong else "Mira Tolen", calls=calls))
    return rows


def test_gate_passes_on_clean_data_and_builds_data_docs(tmp_path: Path) -> None:
    res, sink = run_curate([table(_runs(12))], CurateConfig(), tmp_path)
    assert res.gate_success and res.failed_expectations == ()
    res.raise_for_gate()
    assert res.rows_kept == 12
    docs = Path(res.data_docs_path or "")
    assert docs == tmp_path / "data_docs" / "index.html" and docs.exists()
    pages = {p.parent.parent.parent.name for p in (tmp_path / "data_docs" / "validations").rglob("*.html")}
    assert pages == {"curate_runs", "curate_totals", "curate_input", "curate_steps"}
    assert res.stats.gate is not None
    checks = {(c.suite, c.check) for c in res.stats.gate.checks}
    for name in (
        ("curate_runs", "ids_unique"),
        ("curate_runs", "steps_in_range"),
        ("curate_runs", "tokens_in_range"),
        ("curate_totals", "min_rows"),
        ("curate_input", "correctness_floor"),
        ("curate_steps", "roles_in_set"),
        ("curate_steps", "agents_in_set"),
        ("curate_steps", "turns_non_empty"),
    ):
        assert name in checks


def test_gate_fails_below_the_correctness_floor(tmp_path: Path) -> None:
    cfg = CurateConfig.model_validate({"gate": {"correctness_floor": 0.8}})
    res, sink = run_curate([table(_runs(12, wrong_every=2))], cfg, tmp_path)
    assert not res.gate_success
    assert [(c.suite, c.check) for c in res.failed_expectations] == [("curate_input", "correctness_floor")]
    (failed,) = res.failed_expectations
    assert failed.expectation == "expect_column_mean_to_be_between"
    assert failed.observed_value == pytest.approx(0.5)
    with pytest.raises(CurateGateError, match="correctness_floor") as err:
        res.raise_for_gate()
    assert err.value.result.report_path == res.report_path
    assert "correctness_floor" in res.headline and "FAILED" in res.headline
    assert res.rows_in == 12 == res.rows_kept + res.rows_quarantined


def test_gate_names_a_failing_step_check(tmp_path: Path) -> None:
    cfg = CurateConfig.model_validate(
        {"gate": {"allowed_agents": ["manager", "search_agent", "verifier"], "allowed_tools": ["web_search"]}}
    )
    res, _ = run_curate([table(_runs(8))], cfg, tmp_path)
    failed = {c.check: c for c in res.failed_expectations}
    assert set(failed) == {"agents_in_set", "tools_in_set"}
    assert failed["agents_in_set"].partial_unexpected == ["reflector"]
    assert failed["agents_in_set"].unexpected_count == 8


def test_report_has_plots_reason_table_and_drift(tmp_path: Path) -> None:
    rows = _runs(16, wrong_every=3)
    first, _ = run_curate([table(rows)], CurateConfig(), tmp_path / "one")
    html = Path(first.report_path).read_text()
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', html)
    assert {
        "turns (steps) per trajectory",
        "tokens per trajectory",
        "step roles by agent tag",
        "tool error rate per tool",
        "observation lengths",
        "quarantined runs per filter reason",
    } <= set(images)
    assert '<h2 id="reasons">Filter reasons</h2>' in html
    assert "<td>incorrect</td><td>6</td>" in html
    assert "No previous run" in html
    assert 'href="data_docs/index.html"' in html
    tools = first.stats.steps_input.tools
    assert tools["crawl_page"] == ToolStats(calls=4, errors=4, error_rate=1.0)

    second, _ = run_curate([table(rows[:8])], CurateConfig(), tmp_path / "two", previous=first.stats)
    html2 = Path(second.report_path).read_text()
    assert 'id="plot-drift-n_steps"' in html2 and 'id="plot-drift-tokens"' in html2
    drift = {r.metric: r for r in second.stats.drift}
    assert drift["rows_in"].previous == 16 and drift["rows_in"].current == 8 and drift["rows_in"].flag
    assert "Drift" in headline_markdown(second.stats)
    # the report renders from summaries alone, e.g. an empty run against a previous one
    assert "<html>" in render_report(CurationStats(), first.stats)
