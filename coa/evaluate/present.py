"""What a front end shows of the evaluation steps (:data:`coa.plan.stages.PRESENTERS`)."""

from __future__ import annotations

import posixpath

from coa import io
from coa.evaluate.metrics import metrics_rows
from coa.evaluate.summary import EvalSummary, Headline, TrainingReportSummary
from coa.facts import Fact, Facts, Markdown, Page, Table, show
from coa.steps import StepResult
from coa.view.links import sample_links


def model_of(result: StepResult) -> str:
    """The model an evaluation ran, as its lineage records it (an artifact URI or a folder/hub id)."""
    model = io.read_lineage(result.ref).get("inputs", {}).get("model") or {}
    return str(model.get("model") or model.get("uri") or "the model")


VERDICTS = (("failed", {"verdict": "fail"}), ("passed", {"verdict": "pass"}))
"""The views of an evaluation's page its facts link."""


def _headline(s: Headline, result: StepResult, what: str) -> tuple[Fact, ...]:
    """The report's headline as markdown, the HTML report itself (a front end shows it in place) and
    links to the failed and passed episodes of its page (the teacher's beside them in a report's)."""
    items: list[Fact] = [Markdown("headline", s.headline, f"{what}: {result.ref.uri}")] if s.headline else []
    if s.report:
        items.append(
            Page("report", result.ref.uri, posixpath.basename(s.report), f"{what} (the HTML report)")
        )
    sample = sample_links(result.ref, "Failed and passed episodes", VERDICTS)
    return (*items, sample) if sample is not None else tuple(items)


def present_eval(s: EvalSummary, result: StepResult) -> Facts:
    """Metrics per family, per benchmark (pass@1 ± SE, pass@k, maj@K, tokens), the headline."""
    items: list[Fact] = []
    if s.benchmarks:
        items.append(
            Table(
                "benchmarks",
                metrics_rows(s.benchmarks, "benchmark"),
                "Evaluation per benchmark (pass@1 ± SE, pass@k, maj@K, tokens)",
            )
        )
    items.append(
        Table("metrics", metrics_rows(s.metrics), f"Evaluation of {model_of(result)}: {result.ref.uri}")
    )
    return Facts((*items, *_headline(s, result, "Evaluation")))


def present_eval_report(s: Headline, result: StepResult) -> Facts:
    return Facts(_headline(s, result, "Evaluation report"))


def present_report(s: TrainingReportSummary, result: StepResult) -> Facts:
    """The comparison table (student before/after SFT vs the teacher) and the report itself."""
    return Facts(
        (
            Table(
                "comparison",
                [{k: show(v) for k, v in row.items()} for row in s.comparison],
                "Student before/after SFT vs the teacher on the held-out tasks",
            ),
        )
        + _headline(s, result, "Training report")
    )
