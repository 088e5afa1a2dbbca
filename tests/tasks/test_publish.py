"""The reports where users look (tasks/publish.py), against a real Prefect server (the test harness's).

The curation, evaluation and training steps publish through the one publisher: their tables become
table artifacts, and their committed HTML reports markdown artifacts that show the page in the UI
(headings as markdown, figures as inline ``data:`` PNGs), headed by a link a browser can open: the
``file://`` path of a local store, a presigned URL on S3 (moto here), which fetches the report.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import matplotlib.pyplot as plt
import pytest
from moto.server import ThreadedMotoServer
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.testing.utilities import prefect_test_harness

from coa import io, pages
from coa.curate import step as curate_step
from coa.curate.step import CurateSummary
from coa.evaluate import step as evaluate_step
from coa.evaluate.summary import EvalSummary, TrainingReportSummary
from coa.settings import Settings
from coa.steps import Step, StepResult
from coa.view import commit
from tasks.publish import publish

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def s3_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    port = _free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    moto.start()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("COA_S3_ENDPOINT_URL", endpoint)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="reports")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield "s3://reports/store"
    finally:
        moto.stop()


def _report(title: str) -> str:
    """A report page of the kit every stage's report is built with: a table, a figure, a relative link."""
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [3.0, 2.0, 1.5])
    return pages.page(
        title,
        [
            '<h2>Headline</h2><p>Gate: <span class="ok">PASSED</span></p>',
            pages.table(["metric", "value"], [["runs kept", 7]]),
            pages.figure(pages.png(fig), "loss per step"),
            '<p>Data Docs: <a href="data_docs/index.html">index</a></p>',
        ],
    )


def _committed(root: str, kind: str, summary: Any) -> StepResult:
    writer = io.Store(root, Settings.from_env()).writer(kind, "demo", {"kind": kind})
    writer.write_file("report.html", _report(f"{kind} report"))
    writer.write_file("data_docs/index.html", "<p>expectations</p>")
    # the viewer's page as the runner's hook records it (tests/view/test_viewer.py builds real ones)
    writer.write_file(commit.PAGE_FILE, f"<p>episodes of {kind}</p>")
    writer.extra_lineage[commit.LINEAGE_KEY] = {
        "file": commit.PAGE_FILE,
        "shown": 2,
        "total": 9,
        "teacher": None,
    }
    ref = writer.commit()
    summary = summary.model_copy(update={"report": io.join(ref.uri, "report.html")})
    return StepResult(kind, ref, False, summary.to_dict())


def _published(root: str) -> dict[str, Any]:
    """Publish a curation, an evaluation and a training report step from ``root``; the artifacts by key."""
    results = {
        "curate": (curate_step.STAGE, _committed(root, "curated", CurateSummary(
            rows_in=9, rows_kept=7, rows_quarantined=2, reasons={"wrong": 2}, gate_success=True,
            failed_expectations=(), headline="## Curate\n\n| runs kept | 7 |"))),
        "evaluate.sft": (evaluate_step.STAGE, _committed(root, "eval", EvalSummary(
            metrics={"math": {"pass@1": 0.5, "tasks": 4, "runs": 4, "samples": 1, "format_valid": 1.0,
                "tokens_per_task": 12.0, "tool_calls_per_task": 0.0, "tokens_per_solved": 24.0}},
            headline="**Evaluation of `sft`**"))),
        "report": (evaluate_step.REPORT, _committed(root, "report", TrainingReportSummary(
            comparison=({"family": "math", "acc. before": 0.0, "acc. after": 0.5},)))),
    }  # fmt: skip

    @flow
    def reports() -> None:
        for name, (stage, result) in results.items():
            publish(Step(name, stage, "demo", None), result, scope="pipeline-demo")

    reports()
    with get_client(sync_client=True) as client:
        # the newest of each key (the module's server holds the other tests' artifacts too)
        return {a.key: a for a in sorted(client.read_artifacts(), key=lambda a: a.created) if a.key}


def _rows(artifact: Any) -> Any:
    assert artifact.type == "table"
    return json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data


def test_reports_render_in_the_ui_from_a_local_store(server: None, tmp_path: Any) -> None:
    arts = _published(str(tmp_path / "store"))
    for step in ("curate", "evaluate-sft", "report"):
        page = arts[f"pipeline-demo-{step}-report"]
        assert page.type == "markdown", step
        assert page.data.startswith("Full report: `file://") and str(tmp_path) in page.data
        assert "\n## Headline\n" in page.data  # a markdown heading: the UI styles it
        assert "<strong>PASSED</strong>" in page.data and "<style" not in page.data
        assert "| metric | value |\n|---|---|\n| runs kept | 7 |" in page.data  # a markdown table
        assert '<img alt="loss per step" src="data:image/png;base64,' in page.data  # the figure inline
        assert f'href="file://{tmp_path}/store/' in page.data and 'data_docs/index.html"' in page.data
    assert arts["pipeline-demo-curate-headline"].type == "markdown"
    (metrics,) = _rows(arts["pipeline-demo-evaluate-sft-metrics"])  # the terminal's display cells
    assert metrics["family"] == "math" and metrics["tasks"] == "4" and metrics["pass@1 ± se"] == "50.0%"
    assert _rows(arts["pipeline-demo-report-comparison"])[0]["acc. after"] == 0.5
    for step, kind in (("curate", "curated"), ("evaluate-sft", "eval"), ("report", "report")):
        link = arts[f"pipeline-demo-{step}-episodes"]  # every step with a page links it
        assert link.type == "markdown" and "a sample of 2 of 9 episodes, evenly spaced" in link.description
        assert f"(file://{tmp_path}/store/{kind}/demo-" in link.data and "/episodes.html)" in link.data
    curated = arts["pipeline-demo-curate-episodes-sample"].data
    assert "[quarantined as wrong (2)](file://" in curated
    assert "episodes.html#kind=quarantined&reason=wrong)" in curated and "#kind=run)" in curated
    assert "[failed](file://" in arts["pipeline-demo-evaluate-sft-episodes-sample"].data


def test_reports_on_s3_link_to_presigned_urls_a_browser_opens(server: None, s3_root: str) -> None:
    arts = _published(s3_root)
    page = arts["pipeline-demo-curate-report"].data
    first = page.splitlines()[0]
    assert first.startswith("[Open the full report](http://127.0.0.1:") and "Signature=" in first, first
    url = first.split("](", 1)[1].split(")", 1)[0]
    report = httpx.get(url, timeout=10)
    assert report.status_code == 200 and "<h2>Headline</h2>" in report.text  # no credentials needed
    docs = page.split('<a href="', 1)[1].split('"', 1)[0]  # the relative link, presigned too
    assert "data_docs/index.html" in docs and httpx.get(docs, timeout=10).text == "<p>expectations</p>"
    link = arts["pipeline-demo-evaluate-sft-episodes"].data
    url = link.split("](", 1)[1].split(")", 1)[0]
    assert "Signature=" in url and httpx.get(url, timeout=10).text == "<p>episodes of eval</p>"
    failed = arts["pipeline-demo-evaluate-sft-episodes-sample"].data.split("[failed](", 1)[1].split(")", 1)[0]
    assert "Signature=" in failed and failed.endswith("#verdict=fail")  # the filter outside the signature
    assert httpx.get(failed, timeout=10).text == "<p>episodes of eval</p>"


def test_a_report_that_cannot_be_read_is_one_line_not_a_failed_step(tmp_path: Any) -> None:
    from coa.facts import Page
    from tasks.publish import page_markdown

    writer = io.Store(str(tmp_path / "store"), Settings.from_env()).writer("eval", "demo", {"n": 1})
    writer.write_file("report.html", _report("eval report"))
    ref = writer.commit()
    said = page_markdown(Page("report", ref.uri, "gone.html"))
    assert said.startswith(f"The report `{ref.uri}/gone.html` cannot be shown: ") and "has no file" in said
