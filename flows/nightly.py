"""Nightly retraining: new tasks → collect → curate across nights → convert → SFT → RL → evaluate → gate.

The plan is :func:`coa.plan.nightly.nightly_plan` (the candidate is the last model trained: RL's when
the config has an ``rl`` section, else SFT's), made from the registry's champion and the ledger's
earlier nights (:class:`coa.registry.promotion.Promoter`); :func:`coa.plan.nightly.run_night` runs it
through the same Prefect step runner as the pipeline flow (:func:`tasks.dispatch.step_runner`), puts
the night on the ledger once its data is merged, and applies the gate's verdict to the registry: the
champion moves (promote) or the candidate is recorded as refused, which fails nothing. With no new
task tonight the run stops after ``nightly.new_tasks`` and trains nothing. :func:`tasks.summary.publish_night`
publishes the verdict, the history and the summary. Runs are named by profile and night
(``nightly-nightly-2026-11-25``); artifact keys are scoped the same way (``nightly-demo-gate``).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from coa import tracking
from coa.plan import PromotionConfig, load_pipeline_config
from coa.plan.nightly import nightly_plan, run_night, tonight
from coa.registry.promotion import Promoter
from coa.steps import ModelInput
from tasks.dispatch import step_runner
from tasks.fanout import executor
from tasks.outcome import project_errors_fail
from tasks.publish import scope_of
from tasks.summary import publish_night


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
    cfg = load_pipeline_config(config_path, overrides or [])  # a bad profile: one line (project_errors_fail)
    tracking.use(cfg.tracking)  # the night's steps and the registry mirror report to the profile's tracker
    promotion, night = cfg.promotion or PromotionConfig(), night or tonight()
    promoter, scope = Promoter(cfg.run_name, promotion.model_name), scope_of("nightly", config_path)
    champion = promoter.champion()  # the model URI tonight's candidate is gated against (None: none yet)
    earlier = promoter.earlier(night, promotion.previous_nights)
    plan = nightly_plan(cfg, ModelInput.parse(champion) if champion else None, earlier, promoter.settings)
    get_run_logger().info("nightly %r, night %s: %s", cfg.run_name, night, " → ".join(s.name for s in plan))
    with executor(cfg.execution) as shards:  # engine ray: a Ray cluster for the night's shards
        done = run_night(plan, step_runner(cfg.dispatch, shards, scope), promoter, night, champion)
    return publish_night(scope, cfg, done)
