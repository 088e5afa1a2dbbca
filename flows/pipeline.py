"""The pipeline flow: task sets → collect → curate → convert → student → SFT → evaluate (→ RL).

It reads as the list of stages. Each stage is a Prefect task that returns an artifact reference;
stages that are not configured or not built yet are reported as such (nothing is faked). Publishes
a markdown summary and a table of row counts per stage as Prefect artifacts.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from coa import io
from coa.config import load_config
from coa.io import ArtifactRef
from coa.pipeline_config import PipelineConfig
from coa.teacher import ToolsConfig
from coa.train.stage import StudentModel
from tasks.collect import collect_task
from tasks.convert import convert_task
from tasks.curate import curate_task
from tasks.evaluate import evaluate_task, report_task
from tasks.import_tasks import import_tasks_task
from tasks.sft import sft_task, student_task
from tasks.synthetic_tasks import synthetic_tasks_task

NOT_BUILT = {"rl": "agentic RL"}


def _row(stage: str, ref: ArtifactRef, table: str) -> dict[str, Any]:
    return {"stage": stage, "status": "done", "rows": ref.rows(table), "artifact": ref.uri}


def _model_row(stage: str, ref: ArtifactRef | None, path: str = "") -> dict[str, Any]:
    return {"stage": stage, "status": "done", "rows": "", "artifact": ref.uri if ref is not None else path}


def _skipped(stage: str, why: str) -> dict[str, Any]:
    return {"stage": stage, "status": why, "rows": "", "artifact": ""}


@flow(name="pipeline", log_prints=True)
def pipeline(config_path: str = "configs/demo.yaml", overrides: list[str] | None = None) -> dict[str, Any]:
    """Run every configured, built stage on the profile ``config_path`` with dotted ``overrides``."""
    logger = get_run_logger()
    cfg: PipelineConfig = load_config(config_path, overrides or [])
    logger.info("pipeline %r, config fingerprint %s", cfg.run_name, cfg.fingerprint()[:12])
    stages: list[dict[str, Any]] = []
    refs: dict[str, Any] = {}
    train: tuple[ArtifactRef, str] | None = None

    if cfg.synthetic is not None:
        synthetic = synthetic_tasks_task(cfg.synthetic)
        stages += [
            _row("synthetic.train", synthetic, "train"),
            _row("synthetic.heldout", synthetic, "heldout"),
        ]
        refs["synthetic"] = synthetic.model_dump(mode="json")
        train = (synthetic, "train")
    if cfg.tasks.sources:
        imported = import_tasks_task(cfg.tasks)
        stages += [_row("tasks", imported, "tasks"), _row("tasks.quarantine", imported, "quarantine")]
        refs["tasks"] = imported.model_dump(mode="json")
        train = train or (imported, "tasks")
    if train is None:
        raise ValueError("no tasks: configure `synthetic` or `tasks.sources` (see configs/demo.yaml)")

    trajectories = curated = converted = None
    if cfg.collect is not None:
        trajectories = collect_task(cfg.collect, *train)
        stages.append(_row("collect", trajectories, "trajectories"))
        refs["collect"] = trajectories.model_dump(mode="json")
    else:
        stages.append(_skipped("collect", "not configured"))
    if cfg.curate is not None and trajectories is not None:
        curated = curate_task(cfg.curate, trajectories, *train)
        stages += [_row("curate", curated, "trajectories"), _row("curate.quarantine", curated, "quarantine")]
        refs["curate"] = curated.model_dump(mode="json")
        refs["report"] = f"{curated.uri}/report.html"
    else:
        stages.append(_skipped("curate", "not configured"))
    if cfg.convert is not None and curated is not None:
        converted = convert_task(cfg.convert, curated, *train)
        stages += [_row("convert.sft", converted, "sft"), _row("convert.rl_prompts", converted, "rl_prompts")]
        stages.append(_row("convert.quarantine", converted, "quarantine"))
        refs["convert"] = converted.model_dump(mode="json")
    else:
        stages.append(_skipped("convert", "not configured"))
    base = tuned = None
    if cfg.student is not None and converted is not None:
        base = student_task(cfg.student, converted)
        refs["student"] = base.ref.uri if base.ref is not None else base.path
        stages.append(_model_row("student", base.ref, base.path))
        if cfg.sft is not None:
            tuned = sft_task(cfg.sft, base, converted)
            refs["sft"] = tuned.model_dump(mode="json")
            stages.append(_model_row("sft", tuned))
        else:
            stages.append(_skipped("sft", "not configured"))
    else:
        stages.append(_skipped("sft", "not configured"))

    if cfg.evaluate is not None and base is not None and cfg.synthetic is not None:
        heldout = (synthetic, "heldout")
        tools = cfg.evaluate.tools or (cfg.collect.tools if cfg.collect else ToolsConfig())
        before = evaluate_task(cfg.evaluate, *heldout, base, tools, "before SFT")
        stages.append({**_row("evaluate.before", before[0], "eval")})
        after = None
        if tuned is not None:
            model = StudentModel(str(io.local_folder(tuned, "model")), tuned)
            after = evaluate_task(cfg.evaluate, *heldout, model, tools, "after SFT")
            stages.append(_row("evaluate.after", after[0], "eval"))
        teacher = collect_task(cfg.collect, *heldout) if cfg.collect is not None else None
        if teacher is not None:
            stages.append(_row("collect.heldout", teacher, "trajectories"))
        report, comparison = report_task(cfg.run_name, *heldout, before, after, tuned, teacher)
        refs["training_report"] = f"{report.uri}/report.html"
        refs["comparison"] = comparison
    else:
        why = "not configured" if cfg.evaluate is None else "needs a student and held-out synthetic tasks"
        stages.append(_skipped("evaluate", why))

    for stage, what in NOT_BUILT.items():
        stages.append({**_skipped(stage, "not built yet"), "note": what})
        logger.warning("stage %s is not built yet: %s", stage, what)

    create_table_artifact(key="pipeline-row-counts", table=stages, description="Rows per stage of this run")
    lines = [
        f"# Pipeline run `{cfg.run_name}`",
        "",
        "| stage | status | rows | artifact |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {s['stage']} | {s['status']} | {s['rows']} | {s['artifact'] or s.get('note', '')} |"
        for s in stages
    ]
    create_markdown_artifact(
        key="pipeline-summary", markdown="\n".join(lines), description="Pipeline summary"
    )
    return {"stages": stages, **refs}
