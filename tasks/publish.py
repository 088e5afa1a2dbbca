"""Prefect artifacts per stage, made from a step's summary: small, keyed per step, described.

Keys are unique per flow, profile and step (``pipeline-demo-collect-summary`` and
``pipeline-demo-collect-heldout-summary`` are two artifacts; ``nightly-demo-…`` keeps its own);
tables rather than code blocks (the UI clips wide code); links point at the committed artifact
(its store URI), never at a temporary folder.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

from coa import io
from coa.collect.summary import CollectSummary
from coa.curate.step import CurateSummary
from coa.evaluate.metrics import percent_by_family
from coa.evaluate.summary import EvalSummary, Headline, TrainingReportSummary
from coa.registry.gate import Verdict
from coa.rl.summary import FamilyChoice, RLSummary
from coa.steps import Step, StepResult
from coa.train.summary import SFTSummary

Keys = Callable[[str], str]
"""``what`` → the artifact key of ``what`` of the step being published."""
PASS, FAIL = "PASS", "FAIL"
"""The gate's marks: plain text, readable without an emoji font."""


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits, single dashes) made of ``parts``
    (e.g. the scope ``nightly-demo``, the step ``evaluate.sft``, ``metrics``)."""
    raw = "-".join(p for p in parts if p).lower()
    return "-".join(w for w in "".join(c if c.isalnum() else "-" for c in raw).split("-") if w)


def scope_of(flow: str, config_path: str) -> str:
    """The artifact-key scope of a flow run: the flow and its profile (``nightly-demo``)."""
    return artifact_key(flow, PurePath(config_path).stem)


def link(uri: str) -> str:
    """A link a browser can follow: ``file://`` for a local store, the URI itself otherwise."""
    return uri if "://" in uri else f"file://{uri}"


def show(value: Any) -> Any:
    """A table cell: ``-`` for a missing value, rounded floats, JSON for structures."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return value


def _collect(step: Step, result: StepResult, key: Keys) -> None:
    s = CollectSummary.from_dict(result.summary)
    keys = (
        "runs",
        "completed",
        "completion_rate",
        "accuracy",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
    )
    rows = [{"metric": k, "value": show(getattr(s, k))} for k in keys]
    resumed = s.collect.resumed if s.collect else None
    rows.append({"metric": "runs resumed from checkpoints", "value": show(resumed)})
    counts = ("statuses", "tool_calls", "errors_by_kind")
    rows += [{"metric": k, "value": show(getattr(s, k))} for k in counts]
    rows += [{"metric": "warning", "value": w} for w in s.warnings]
    if s.repaired:
        rows.append({"metric": "repaired (retry of failed runs)", "value": show(s.repaired.model_dump())})
    create_table_artifact(
        key=key("summary"),
        table=rows,
        description=f"Teacher collection `{step.name}`: {result.ref.uri}",
    )


def _curate(step: Step, result: StepResult, key: Keys) -> None:
    s = CurateSummary.from_dict(result.summary)
    create_markdown_artifact(
        key=key("headline"),
        markdown=s.headline,
        description=f"Curation headline: {result.ref.uri}",
    )
    create_link_artifact(
        key=key("report"),
        link=link(s.report or io.join(result.ref.uri, "report.html")),
        description="Data-quality report (committed with the curated artifact)",
    )


def _sft(step: Step, result: StepResult, key: Keys) -> None:
    s = SFTSummary.from_dict(result.summary)
    png = base64.b64encode(io.read_file(result.ref, "loss_curve.png")).decode()
    create_markdown_artifact(
        key=key("loss-curve"),
        markdown=f"# SFT loss\n\n![loss curve](data:image/png;base64,{png})\n\n"
        f"| steps run / planned | final loss | held-out loss | tokens seen | tokens/s | device |\n"
        f"|---|---|---|---|---|---|\n"
        f"| {s.steps_run} / {s.steps_planned} | {show(s.final_loss)} | "
        f"{show(s.heldout_loss)} | "
        f"{show(s.tokens_seen)} | {show(s.tokens_per_s)} | {s.device} |\n\n"
        f"Model: `{result.ref.uri}`" + (f"\n\n**Warning:** {s.overfit_warning}" if s.overfit_warning else ""),
        description="Training and held-out loss of the SFT run",
    )


def _model_of(result: StepResult) -> str:
    """The model an evaluation ran, as its lineage records it (an artifact URI or a folder/hub id)."""
    model = io.read_lineage(result.ref).get("inputs", {}).get("model") or {}
    return str(model.get("model") or model.get("uri") or "the model")


def _family_markdown(choice: FamilyChoice | None) -> str:
    """The family ``rl.families: auto`` picked, why, and its warning when it fell back."""
    if not choice:
        return ""
    scores = percent_by_family(choice.accuracy)
    warning = f" **Warning:** {choice.warning}" if choice.warning else ""
    why = f"{choice.rule}; held-out accuracy after SFT: {scores}"
    left_out = "".join(f" Left out: {f} ({reason})." for f, reason in sorted(choice.excluded.items()))
    return f"Family: **{choice.family}** ({why}).{left_out}{warning}\n\n"


def _rl(step: Step, result: StepResult, key: Keys) -> None:
    s = RLSummary.from_dict(result.summary)
    png = base64.b64encode(io.read_file(result.ref, "rl_curves.png")).decode()
    points = s.curves
    keys = (
        "step",
        "reward",
        "rewards/correct/mean",
        "rewards/format/mean",
        "entropy",
        "dynamic/zero_variance_share",
    )
    alarm = s.alarm
    heldout = list(s.heldout)
    create_markdown_artifact(
        key=key("curves"),
        markdown="# RL (GRPO/DAPO)\n\n"
        + (f"**Reward-hacking alarm:** {alarm}\n\n" if alarm else "")
        + (f"**No learning signal:** {s.no_signal}\n\n" if s.no_signal else "")
        + _family_markdown(s.family_choice)
        + f"![reward, entropy, zero-variance share](data:image/png;base64,{png})\n\n"
        f"| steps run / planned | rollouts | seconds | last reward | last entropy | device |\n"
        f"|---|---|---|---|---|---|\n"
        f"| {s.steps_run} / {s.steps_planned} | {show(s.rollouts)} | "
        f"{show(s.train_runtime_s)} | {show(s.final_reward)} | "
        f"{show(s.final_entropy)} | "
        f"{s.device} |\n\nModel: `{result.ref.uri}`" + _heldout_markdown(heldout),
        description="Reward per term, entropy and zero-variance share of the RL run"
        + (": REWARD-HACKING ALARM" if alarm else ""),
    )
    create_table_artifact(
        key=key("curve-points"),
        table=[{k: show(p.get(k)) for k in keys} for p in points],
        description=f"RL curves per logged step: {result.ref.uri}",
    )


def _heldout_markdown(points: list[dict[str, Any]]) -> str:
    """The held-out score per evaluation (greedy rollouts of prompts kept out of training)."""
    if not points:
        return ""
    lines = ["", "", "| step | held-out correct | held-out valid | held-out reward |", "|---|---|---|---|"]
    lines += [
        f"| {int(p['step'])} | {show(p.get('correct'))} | {show(p.get('format_valid'))} | "
        f"{show(p.get('reward'))} |"
        for p in points
    ]
    return "\n".join(lines)


def _evaluate(step: Step, result: StepResult, key: Keys) -> None:
    s = EvalSummary.from_dict(result.summary)
    create_table_artifact(
        key=key("metrics"),
        table=[{"family": f, **{k: show(v) for k, v in m.items()}} for f, m in s.metrics.items()],
        description=f"Evaluation `{step.name}` of {_model_of(result)}: {result.ref.uri}",
    )
    if s.benchmarks:
        create_table_artifact(
            key=key("benchmarks"),
            table=[{"benchmark": b, **{k: show(v) for k, v in m.items()}} for b, m in s.benchmarks.items()],
            description=f"Evaluation `{step.name}` per benchmark (pass@1 ± SE, pass@k, maj@K, tokens)",
        )
    _headline(step, result, key, "Evaluation")


def _headline(step: Step, result: StepResult, key: Keys, what: str) -> None:
    """The report's headline as a markdown artifact, with a link to the HTML report."""
    s = Headline.from_dict(result.summary)
    if not s.headline:
        return
    create_markdown_artifact(
        key=key("headline"),
        markdown=s.headline + (f"\n\n[{what} report]({link(s.report)})" if s.report else ""),
        description=f"{what} `{step.name}`: {result.ref.uri}",
    )


def _report(step: Step, result: StepResult, key: Keys) -> None:
    s = TrainingReportSummary.from_dict(result.summary)
    create_table_artifact(
        key=key("comparison"),
        table=[{k: show(v) for k, v in row.items()} for row in s.comparison],
        description="Student before/after SFT vs the teacher on the held-out tasks",
    )
    create_link_artifact(
        key=key("link"),
        link=link(s.report or ""),
        description="Training report",
    )


PUBLISHERS: dict[str, Callable[[Step, StepResult, Keys], None]] = {
    "sft": _sft,
    "rl": _rl,
    "collect": _collect,
    "collect.retry": _collect,
    "curate": _curate,
    "evaluate": _evaluate,
    "eval-report": lambda step, result, key: _headline(step, result, key, "Evaluation report"),
    "report": _report,
}
"""Step builder (:attr:`coa.steps.Step.builder`) → its publisher, which reads that stage's typed summary."""
BY_KIND: dict[str, Callable[[Step, StepResult, Keys], None]] = {"eval": _evaluate}
"""A step without a builder (an ``eval`` artifact scored from prediction files) → by its artifact kind."""


def publish(step: Step, result: StepResult, scope: str = "") -> None:
    """The stage's Prefect artifacts for a built or reused step; ``scope`` (the flow and its profile,
    :func:`scope_of`) prefixes their keys so runs of other flows and profiles keep their own."""

    def key(what: str) -> str:
        return artifact_key(scope, step.name, what)

    publisher = PUBLISHERS.get(step.builder) if step.builder else BY_KIND.get(step.kind)
    if publisher is not None:
        publisher(step, result, key)


def verdict_markdown(name: str, model: str, verdict: Verdict, outcome: str) -> str:
    """The verdict as the Prefect artifact of a night: outcome, checks, reasons, per-benchmark table."""
    lines = [f"# Promotion gate for `{name}`: {outcome}", "", f"candidate: `{model}`", ""]
    lines += [f"- **{PASS if ok else FAIL}** {check}" for check, ok in verdict.checks.items()]
    lines += ["", "## Reasons", ""] + [f"- {r}" for r in verdict.reasons]
    if verdict.per_benchmark:
        lines += ["", "| benchmark | pairs | champion | candidate | delta | interval | regression |"]
        lines += ["|---|---|---|---|---|---|---|"]
        for bench, d in verdict.per_benchmark.items():
            lines.append(
                f"| {bench} | {d.pairs} | {d.baseline:.3f} | {d.candidate:.3f} | "
                f"{d.delta:+.3f} | [{d.low:+.3f}, {d.high:+.3f}] | {'yes' if d.regression else 'no'} |"
            )
    return "\n".join(lines)
