"""Nightly retraining: new tasks → collect → curate across nights → convert → SFT → RL → evaluate → gate.

The plan is :func:`coa.registry.nightly.nightly_plan` (RL when the config has an ``rl`` section; the
candidate is the last model trained: the RL model then, else the SFT model).
Each step runs through the same Prefect task as the pipeline flow (or on the GPU pool with
``dispatch.mode: deployment``). The gate's verdict then moves the champion (promote) or is recorded
as a refused candidate; a refused candidate keeps the champion and fails nothing: the run completes
and publishes the reasons (a Prefect artifact, the log, the registry history). With no new task
tonight the run stops after ``nightly.new_tasks`` and trains nothing.
"""

from __future__ import annotations

import time
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.states import Failed

from coa.pipeline_config import load_pipeline_config
from coa.registry import Registry
from coa.registry.config import PromotionConfig
from coa.registry.gate import Verdict, apply
from coa.registry.nightly import (
    CANDIDATE_EVAL,
    GATE,
    MERGE,
    NEW_TASKS,
    Ledger,
    candidate_step,
    nightly_plan,
    tonight,
    verdict_markdown,
)
from coa.steps import StepResult
from flows.pipeline import publish_lineage, publish_summary, run_planned_step
from tasks.fanout import executor


@flow(name="nightly", log_prints=True)
def nightly(
    config_path: str = "configs/nightly.yaml", overrides: list[str] | None = None, night: str | None = None
) -> Any:
    """Retrain on tonight's new tasks and put the candidate through the promotion gate."""
    logger = get_run_logger()
    cfg = load_pipeline_config(config_path, overrides or [])
    promotion = cfg.promotion or PromotionConfig()
    night = night or tonight()
    registry, ledger = Registry(), Ledger(cfg.run_name)
    steps = nightly_plan(cfg, night, registry, ledger)
    logger.info("nightly %r, night %s: %s", cfg.run_name, night, " → ".join(s.name for s in steps))
    done: dict[str, StepResult] = {}
    seconds: dict[str, float] = {}
    with executor(cfg.execution) as shards:  # engine ray: a Ray cluster for the night's shards
        for step in steps:
            start = time.perf_counter()
            outcome = run_planned_step(cfg, config_path, overrides or [], step, done, shards)
            if isinstance(outcome, str):
                publish_summary(cfg, steps, done, failed=(step.name, outcome))
                return Failed(message=f"{step.name}: {outcome}")
            done[step.name] = outcome
            seconds[step.name] = round(time.perf_counter() - start, 2)
            if step.name == NEW_TASKS and done[step.name].summary.get("new") == 0:
                logger.info("no new tasks tonight: nothing to collect or train; the champion stays")
                publish_summary(cfg, steps, done)
                return {"night": night, "outcome": "no new tasks", "seconds": seconds}
            if step.name == MERGE:  # tonight's data is committed: later nights build on it whatever follows
                ledger.record(night, done["collect"].ref.uri, done[NEW_TASKS].ref.uri)
    summary = done[GATE].summary
    verdict = Verdict(
        promote=bool(summary["promote"]),
        reasons=tuple(summary["reasons"]),
        checks=dict(summary["checks"]),
        per_benchmark=dict(summary["per_benchmark"]),
    )
    candidate = done[candidate_step(steps)].ref.uri
    evaluations = {"candidate": done[CANDIDATE_EVAL].ref.uri}
    if "evaluate.champion" in done:
        evaluations["champion"] = done["evaluate.champion"].ref.uri
    apply(registry, promotion.model_name, candidate, verdict, evaluations)
    champion = registry.champion(promotion.model_name)
    outcome = "promoted" if verdict.promote else "refused: the champion stays"
    for reason in verdict.reasons:
        (logger.info if verdict.promote else logger.warning)("gate: %s", reason)
    logger.info(
        "gate %s; champion of %s: %s", outcome, promotion.model_name, champion.model_uri if champion else "-"
    )
    create_markdown_artifact(
        key="nightly-gate",
        markdown=verdict_markdown(promotion.model_name, candidate, verdict.as_dict(), outcome),
        description=f"Promotion gate of night {night}: {outcome}",
    )
    publish_lineage(done)
    result = publish_summary(cfg, steps, done)
    result.update(
        night=night,
        outcome=outcome,
        verdict=verdict.as_dict(),
        candidate=candidate,
        champion=champion.model_uri if champion else None,
        seconds=seconds,
    )
    return result
