"""Nightly retraining: new tasks → collect → curate across nights → convert → SFT → RL → evaluate → gate.

The plan is :func:`coa.plan.nightly.nightly_plan` (RL when the config has an ``rl`` section; the
candidate is the last model trained: the RL model then, else the SFT model); this flow resolves
what it needs from the registry (the champion) and the ledger (the earlier nights) first. Each step
runs through the same Prefect task as the pipeline flow, or crosses as a step spec to the GPU pool
with ``dispatch.mode: deployment``. The gate's verdict then moves the champion (promote) or is
recorded as a refused candidate; a refused candidate keeps the champion and fails nothing: the run
completes and publishes the reasons (a Prefect artifact, the log, the registry history). With no new
task tonight the run stops after ``nightly.new_tasks`` and trains nothing. Runs are named by profile
and night (``nightly-nightly-2026-11-25``); artifact keys are scoped the same way (``nightly-demo-gate``).
"""

from __future__ import annotations

import time
from pathlib import PurePath
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from coa import tracking
from coa.plan import PromotionConfig, load_pipeline_config
from coa.plan.nightly import (
    CANDIDATE_EVAL,
    CHAMPION_EVAL,
    GATE,
    MERGE,
    NEW_TASKS,
    candidate_step,
    nightly_plan,
    no_new_tasks,
    tonight,
)
from coa.registry.gate import Verdict, apply, verdict_markdown
from coa.registry.history import NightlyHistory, night_row, stopped_row
from coa.registry.ledger import Ledger
from coa.registry.store import Registry
from coa.steps import ModelInput, StepResult, warm_code_versions
from flows.pipeline import fail, publish_lineage, publish_summary, run_planned_step
from tasks.fanout import executor
from tasks.outcome import project_errors_fail
from tasks.publish import artifact_key, publish_history, scope_of


def run_name() -> str:
    """``nightly-<profile>-<night>``: the nights of one profile told apart at a glance."""
    parameters = flow_run.parameters
    profile = PurePath(str(parameters.get("config_path") or "configs/nightly.yaml")).stem
    return f"nightly-{profile}-{parameters.get('night') or tonight()}"


@flow(name="nightly", flow_run_name=run_name, log_prints=True)
@project_errors_fail
def nightly(
    config_path: str = "configs/nightly.yaml", overrides: list[str] | None = None, night: str | None = None
) -> Any:
    """Retrain on tonight's new tasks and put the candidate through the promotion gate."""
    logger = get_run_logger()
    cfg = load_pipeline_config(config_path, overrides or [])  # a bad profile: one line (project_errors_fail)
    tracking.use(cfg.tracking)  # the night's steps and the registry mirror report to the profile's tracker
    promotion = cfg.promotion or PromotionConfig()
    night = night or tonight()
    scope = scope_of("nightly", config_path)
    registry, ledger = Registry(), Ledger(cfg.run_name)
    champion = registry.champion(promotion.model_name)
    champion_model = ModelInput.parse(champion.model_uri) if champion else None
    earlier = ledger.before(night, promotion.previous_nights)
    steps = nightly_plan(cfg, champion_model, earlier, registry.settings)
    warm_code_versions(steps)  # here, not in the task threads (coa.steps.warm_code_versions)
    logger.info("nightly %r, night %s: %s", cfg.run_name, night, " → ".join(s.name for s in steps))
    done: dict[str, StepResult] = {}
    seconds: dict[str, float] = {}
    with executor(cfg.execution) as shards:  # engine ray: a Ray cluster for the night's shards
        for step in steps:
            start = time.perf_counter()
            outcome = run_planned_step(cfg, step, done, shards, scope=scope)
            if isinstance(outcome, str):
                return fail(scope, cfg, steps, done, step.name, outcome)
            done[step.name] = outcome
            seconds[step.name] = round(time.perf_counter() - start, 2)
            if step.name == NEW_TASKS and no_new_tasks(done[step.name]):
                logger.info("no new tasks tonight: nothing to collect or train; the champion stays")
                history = NightlyHistory(promotion.model_name)
                row = stopped_row(night, {n: r.summary for n, r in done.items()}, NEW_TASKS, history.rows())
                publish_history(scope, promotion.model_name, history.record(row))
                publish_summary(scope, cfg, steps, done)
                return {"night": night, "outcome": "no new tasks", "seconds": seconds}
            if step.name == MERGE:  # tonight's data is committed: later nights build on it whatever follows
                ledger.record(night, done["collect"].ref.uri, done[NEW_TASKS].ref.uri)
    verdict = Verdict.from_dict(done[GATE].summary)
    candidate = done[candidate_step(steps)].ref.uri
    evaluations = {"candidate": done[CANDIDATE_EVAL].ref.uri}
    if CHAMPION_EVAL in done:
        evaluations["champion"] = done[CHAMPION_EVAL].ref.uri
    gated_against = champion.model_uri if champion else None  # two nights at once never leave two champions
    apply(registry, promotion.model_name, candidate, verdict, evaluations, if_champion=gated_against)
    now = registry.champion(promotion.model_name)
    outcome = "promoted" if verdict.promote else "refused: the champion stays"
    for reason in verdict.reasons:
        (logger.info if verdict.promote else logger.warning)("gate: %s", reason)
    logger.info("gate %s; champion of %s: %s", outcome, promotion.model_name, now.model_uri if now else "-")
    create_markdown_artifact(
        key=artifact_key(scope, "gate"),
        markdown=verdict_markdown(promotion.model_name, candidate, verdict, outcome),
        description=f"Promotion gate of night {night}: {outcome}",
    )
    row = night_row(night, {name: r.summary for name, r in done.items()}, verdict, NEW_TASKS)
    publish_history(scope, promotion.model_name, NightlyHistory(promotion.model_name).record(row))
    publish_lineage(scope, done)
    result = publish_summary(scope, cfg, steps, done).model_dump(mode="json")
    result.update(
        night=night,
        outcome=outcome,
        verdict=verdict.to_dict(),
        candidate=candidate,
        champion=now.model_uri if now else None,
        seconds=seconds,
    )
    return result
