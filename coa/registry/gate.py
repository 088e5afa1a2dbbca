"""The promotion gate: may a candidate model replace the champion?

:func:`decide` reads a candidate's evaluation artifact (and the champion's evaluation on the same
tasks, if there is a champion) and returns a :class:`Verdict`. The candidate is promoted only when

1. **contracts and checks**: no artifact in its lineage recorded a failed check;
2. **data quality**: the lineage holds a curation step and every curation gate in it passed;
3. **decontamination**: no evaluated task (by id or by normalized question) is among the
   trajectories it was trained on;
4. **steps run = steps planned** for every training step in the lineage, and no RL step in it raised
   the reward-hacking alarm (``refuse_alarm``);
5. per benchmark, **no regression**: the lower bound of the paired bootstrap interval of
   ``candidate - champion`` is above ``-margin`` (:mod:`coa.evaluate.compare`);
6. a **gain** on the primary benchmark's primary metric of at least ``min_gain`` (the point delta;
   with ``significant_gain`` its interval's lower bound must be above 0 too).

With no champion yet, checks 1-4 decide. :func:`apply` records the verdict in the registry (promote,
or a ``candidate`` entry with the reasons); the champion moves only on a passing verdict.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from coa import io
from coa.evaluate.compare import ALL, bootstrap_interval, compare, paired_values
from coa.lineage import Graph, trace
from coa.registry.config import GateConfig
from coa.registry.store import Champion, Registry
from coa.settings import Settings
from coa.steps import StepSummary


class BenchmarkDelta(BaseModel):
    """The candidate against the champion on one benchmark (:class:`coa.evaluate.compare.Delta`)."""

    model_config = ConfigDict(frozen=True, extra="ignore", ser_json_inf_nan="constants")

    benchmark: str = Field(description="The benchmark (or ``all``).")
    metric: str = Field(description="The metric compared.")
    pairs: int = Field(description="(task, sample) pairs both models were evaluated on.")
    candidate: float = Field(description="The candidate's mean.")
    baseline: float = Field(description="The champion's mean.")
    delta: float = Field(description="candidate - champion, paired.")
    low: float = Field(description="Lower bound of the bootstrap interval of the delta.")
    high: float = Field(description="Upper bound of the bootstrap interval of the delta.")
    confidence: float = Field(description="The interval's confidence.")
    regression: bool = Field(description="Whether the lower bound is below -margin.")


class Estimate(BaseModel):
    """One model's primary metric on the primary benchmark, with its bootstrap interval (the gate's
    resampling of that model's own rows: its samples, confidence and seed)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    value: float = Field(description="The mean over the model's rows on the benchmark.")
    low: float = Field(description="Lower bound of the bootstrap interval of the mean.")
    high: float = Field(description="Upper bound of the bootstrap interval of the mean.")
    rows: int = Field(description="(task, sample) rows it is the mean of.")


class PrimaryMetric(BaseModel):
    """What the gate's gain check reads: the primary metric on the primary benchmark, each model's
    value with its interval, and the paired delta with its interval (None without a champion)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    benchmark: str = Field(description="The primary benchmark (``all``: every evaluated row).")
    metric: str = Field(description="The primary metric (``correct``, ``score``, ``format_valid``).")
    confidence: float = Field(description="The intervals' confidence.")
    candidate: Estimate | None = Field(description="The candidate's value; None: not evaluated on it.")
    champion: Estimate | None = Field(default=None, description="The champion's; None without one.")
    delta: BenchmarkDelta | None = Field(
        default=None, description="candidate - champion on the pairs both were evaluated on, its interval."
    )


def estimate(table: pa.Table, config: GateConfig, seed_offset: int = 0) -> Estimate | None:
    """The primary metric of one evaluation on the primary benchmark with its bootstrap interval;
    None when the evaluation holds no row of that benchmark."""
    per = paired_values(table, table, config.primary_metric)  # a table paired with itself: its own rows
    if config.primary_benchmark == ALL:
        values = np.concatenate([a for a, _ in per.values()]) if per else np.empty(0)
    else:
        values = per.get(config.primary_benchmark, (np.empty(0), None))[0]
    if not len(values):
        return None
    low, high = bootstrap_interval(
        values, config.bootstrap_samples, config.confidence, config.seed + seed_offset
    )
    return Estimate(value=float(values.mean()), low=low, high=high, rows=len(values))


class Verdict(StepSummary):
    """The gate's decision, why, and the evidence (the gate step's summary)."""

    promote: bool = Field(description="Whether the candidate replaces the champion.")
    reasons: tuple[str, ...] = Field(description="Why, one line per check that decided it.")
    checks: dict[str, bool] = Field(description="Check -> passed (lineage, data quality, regression, gain).")
    per_benchmark: dict[str, BenchmarkDelta] = Field(
        default_factory=dict, description="Benchmark -> the paired delta against the champion, its interval."
    )
    primary: PrimaryMetric | None = Field(
        default=None, description="The primary metric on the primary benchmark: each model's, the delta."
    )


def lineage_checks(graph: Graph, config: GateConfig) -> tuple[dict[str, bool], list[str]]:
    """Checks 1-4 on the candidate's lineage: (check → passed, reasons for each failure)."""
    reasons: list[str] = []
    failures = [n for n in graph.nodes.values() if n.checks.get("failure")]
    for n in failures:
        reasons.append(f"check failed in {n.step or n.kind} ({n.uri}): {n.checks['failure']}")
    curated = [n for n in graph.nodes.values() if n.kind == "curated"]
    gate_ok = bool(curated) or not config.require_curation
    if not curated and config.require_curation:
        reasons.append("no curation step in the lineage: the data-quality gate never ran")
    for n in curated:
        gate = n.checks.get("gate") or {}
        if not gate.get("success"):
            gate_ok = False
            reasons.append(
                f"data-quality gate failed in {n.uri}: {', '.join(gate.get('failed', [])) or 'unknown'}"
            )
    steps_ok = True
    for n in graph.nodes.values():
        if "steps_run" in n.checks and n.checks["steps_run"] != n.checks.get("steps_planned"):
            steps_ok = False
            reasons.append(
                f"{n.step or n.kind} ran {n.checks['steps_run']} of {n.checks.get('steps_planned')} "
                f"planned steps ({n.uri})"
            )
    alarms = [n for n in graph.nodes.values() if n.checks.get("alarm")]
    for n in alarms:
        reasons.append(f"{n.step or n.kind} raised the reward-hacking alarm ({n.uri}): {n.checks['alarm']}")
    overlap = contamination(graph)
    if overlap:
        reasons.append(
            f"decontamination: {len(overlap)} evaluated task(s) were in the training data, e.g. {overlap[0]}"
        )
    checks = {
        "contracts": not failures,
        "data_quality": gate_ok,
        "steps": steps_ok,
        "reward_alarm": not (alarms and config.refuse_alarm),
        "decontamination": not overlap,
    }
    return checks, reasons


def contamination(graph: Graph) -> list[str]:
    """Evaluated tasks (by id or normalized question) present in the curated training trajectories."""
    from coa.curate.text import normalize

    evaluated_ids: set[str] = set()
    evaluated_q: dict[str, str] = {}
    for n in graph.nodes.values():
        if n.kind != "eval":
            continue
        tasks = (n.lineage.get("inputs") or {}).get("tasks") or {}
        if not tasks.get("uri"):
            continue
        table = io.read_table(tasks["uri"], tasks.get("table"), columns=["task_id", "question"]).to_pydict()
        evaluated_ids.update(table["task_id"])
        evaluated_q.update(
            {normalize(q): t for t, q in zip(table["task_id"], table["question"], strict=True)}
        )
    hits: list[str] = []
    for n in graph.nodes.values():
        if n.kind != "curated" or "trajectories" not in n.tables:
            continue
        seen = io.read_table(n.uri, "trajectories", columns=["task_id", "question"]).to_pydict()
        for task_id, question in zip(seen["task_id"], seen["question"], strict=True):
            if task_id in evaluated_ids:
                hits.append(f"task {task_id}")
            elif normalize(question) in evaluated_q:
                hits.append(f"question of {evaluated_q[normalize(question)]} (as {task_id})")
    return sorted(set(hits))


def decide(
    config: GateConfig,
    candidate_eval: str,
    champion_eval: str | None,
    settings: Settings | None = None,
) -> Verdict:
    """The verdict on the candidate evaluated in ``candidate_eval`` against ``champion_eval``."""
    graph = trace(candidate_eval, settings)
    checks, reasons = lineage_checks(graph, config)
    per: dict[str, BenchmarkDelta] = {}
    cand = io.read_table(candidate_eval, "eval", settings)
    shown = PrimaryMetric(
        benchmark=config.primary_benchmark, metric=config.primary_metric, confidence=config.confidence,
        candidate=estimate(cand, config),
    )  # fmt: skip
    if champion_eval is None:
        if all(checks.values()):
            reasons.append("no champion yet: the first candidate that passes the checks is promoted")
        return Verdict(promote=all(checks.values()), reasons=tuple(reasons), checks=checks, per_benchmark=per,
                       primary=shown)  # fmt: skip
    champ = io.read_table(champion_eval, "eval", settings)
    shown = shown.model_copy(update={"champion": estimate(champ, config, 1)})
    kwargs = {"samples": config.bootstrap_samples, "confidence": config.confidence, "seed": config.seed}
    deltas = compare(cand, champ, config.metric, **kwargs)  # type: ignore[arg-type]
    if not deltas:
        reasons.append("no (task_id, sample_index) pair evaluated by both the candidate and the champion")
        checks["no_regression"] = checks["gain"] = False
        return Verdict(promote=False, reasons=tuple(reasons), checks=checks, per_benchmark=per, primary=shown)
    regressed = False
    for bench, d in deltas.items():
        per[bench] = BenchmarkDelta(**d.as_dict(), regression=d.low < -config.margin)
        if bench != ALL and d.low < -config.margin:
            regressed = True
            reasons.append(
                f"regression on {bench}: {config.metric} {d.baseline:.3f} → {d.candidate:.3f} "
                f"(delta {d.delta:+.3f}, {d.confidence:.0%} interval [{d.low:+.3f}, {d.high:+.3f}]) "
                f"below -{config.margin}"
            )
    primary = compare(cand, champ, config.primary_metric, **kwargs).get(config.primary_benchmark)  # type: ignore[arg-type]
    if primary is None:
        gain = False
        reasons.append(f"primary benchmark {config.primary_benchmark!r} was not evaluated on both models")
    else:
        delta = BenchmarkDelta(**primary.as_dict(), regression=primary.low < -config.margin)
        shown = shown.model_copy(update={"delta": delta})
        gain = primary.delta > 0 and primary.delta >= config.min_gain
        gain = gain and (primary.low > 0 or not config.significant_gain)
        what = (
            f"{config.primary_metric} on {config.primary_benchmark}: {primary.baseline:.3f} → "
            f"{primary.candidate:.3f} (delta {primary.delta:+.3f}, "
            f"interval [{primary.low:+.3f}, {primary.high:+.3f}])"
        )
        reasons.append(
            ("gain " if gain else "no gain ")
            + what
            + ("" if gain else f"; needs ≥ {config.min_gain} and > 0")
        )
    checks["no_regression"], checks["gain"] = not regressed, gain
    return Verdict(promote=all(checks.values()), reasons=tuple(reasons), checks=checks, per_benchmark=per,
                   primary=shown)  # fmt: skip


def apply(
    registry: Registry,
    name: str,
    model_uri: str,
    verdict: Verdict,
    evaluations: Mapping[str, str],
    if_champion: str | None | object = ...,
) -> Champion | None:
    """Record the verdict: promote on a pass (the new champion), else a history entry (None).

    ``if_champion``: the champion's model URI the candidate was gated against (None: none); a
    promotion is refused when another run moved the alias meanwhile (:meth:`Registry.promote`).

    Idempotent: a verdict already on record for ``model_uri`` (a rerun of the same night) is not
    recorded again, and a model rolled back since is not promoted again by it.
    """
    record = verdict.to_dict()  # as the history stores it
    for entry in registry.history(name):
        if (
            entry.model_uri == model_uri
            and entry.event in ("promote", "candidate")
            and entry.verdict == record
        ):
            current = registry.champion(name)
            return current if verdict.promote and current and current.model_uri == model_uri else None
    if verdict.promote:
        return registry.promote(name, model_uri, record, evaluations, verdict.reasons, if_champion)
    registry.record(name, model_uri, record, evaluations, verdict.reasons)
    return None


PASS, FAIL = "PASS", "FAIL"
"""The gate's marks: plain text, readable without an emoji font."""


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
