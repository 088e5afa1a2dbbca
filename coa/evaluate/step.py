"""The evaluation steps: a model on task tables (→ ``eval`` artifact), and the training report.

* :func:`step`: run the model with real tools on ``tasks`` and on every benchmark the config names
  (``EvalConfig.benchmarks``: imported ``task.v1`` artifacts, each with its own limit and sample
  count) → ``eval`` (eval.v1) and ``metrics.json`` (per family and per benchmark); its key hashes
  the config, the tools, the task tables and the model (its artifact when the pipeline built it,
  else its name). Search and crawl run behind the leak guard (blocked benchmark hosts), live or
  from a recording (``tool_record``, ``recording``; the lineage and ``metrics.json`` say which:
  :mod:`coa.evaluate.replay`). Each answer is scored by its benchmark's scorer, named in the rows
  and ``metrics.json``. The artifact also holds ``report.html`` (:mod:`coa.evaluate.eval_report`)
  and its headline.
* :func:`predictions_step`: the same artifact from prediction files instead of a model
  (``coa evaluate --predictions``; :mod:`coa.evaluate.predictions`).
* :func:`eval_report_step`: the HTML evaluation report of an evaluation, beside the teacher on the
  same tasks and a paired comparison with a baseline evaluation (its headline: ``summary``).
* :func:`report_step`: the HTML training report: the student before and after SFT beside the
  teacher's accuracy and token cost on the same held-out tasks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

import schemas
from coa import io
from coa.errors import UserError
from coa.evaluate.config import EvalConfig, EvalReportConfig, ReportConfig
from coa.evaluate.eval_report import headline, render_eval_report
from coa.evaluate.metrics import coverage_of, metrics_document, scorers_used
from coa.evaluate.replay import LedgerToolBox
from coa.evaluate.stage import EVAL_TABLE, METRICS_FILE, evaluate_tasks, open_generator, select_tasks
from coa.evaluate.summary import EvalReportSummary, EvalSummary, TrainingReportSummary
from coa.evaluate.training_report import ROUND_EVAL, ROUND_MODEL, write_training_report
from coa.format.trained import of_conversion, prompt_format
from coa.lineage import trained_on
from coa.steps import Build, ModelInput, Stage, Step, StepInput, TableInput
from coa.tools.build import build_toolbox, check_tools
from coa.tools.collection import INPUT as ENCYCLOPEDIA
from coa.tools.collection import read_collection
from coa.tools.config import ToolsConfig

BENCHMARK_INPUT = "benchmark{}"
REPORT_FILE = "report.html"


def step(
    config: EvalConfig,
    tools: ToolsConfig,
    tasks: StepInput | None,
    model: StepInput,
    name: str = "evaluate",
    encyclopedia: StepInput | None = None,
) -> Step:
    """Evaluate ``model`` on ``tasks`` (may be None when the config names benchmarks) with ``tools``,
    whose local search serves ``encyclopedia`` (the synthetic step's ``document.v1`` table; None: no
    local search)."""
    if tasks is None and not config.benchmarks:
        raise UserError("evaluate: no tasks (give a task table or name benchmarks in evaluate.benchmarks)")
    inputs: dict[str, StepInput | None] = {"tasks": tasks, "model": model, ENCYCLOPEDIA: encyclopedia}
    for i, spec in enumerate(config.benchmarks):
        ref = io.lookup(spec.uri)
        if ref is None:
            raise UserError(
                f"evaluate.benchmarks[{i}]: no committed artifact at {spec.uri} (coa tasks import)"
            )
        inputs[BENCHMARK_INPUT.format(i)] = TableInput(ref, spec.table)
    identity: dict[str, Any] = {"tools": tools.model_dump(mode="json"), **identify(config)}
    return STAGE.step(config, inputs, name=name, identity=identity)


def identify(config: EvalConfig) -> dict[str, Any]:
    """The judge prompt's version when a judge scores (recomputed where a spec is rebuilt)."""
    if config.judge is None:
        return {}
    from coa.scoring.judge import judge_prompt

    return {"judge_prompt": judge_prompt()["version"]}


def task_plan(b: Build, config: EvalConfig) -> tuple[pa.Table, list[int]]:
    """All tasks to run (the stage's table, then each benchmark's) and each one's sample count."""
    tables, counts = [], []
    main = b.optional("tasks")
    if isinstance(main, TableInput):
        table = main.read()
        tables.append(table)
        counts += [config.samples] * len(select_tasks(table, config))
    for i, spec in enumerate(config.benchmarks):
        table = b.table(BENCHMARK_INPUT.format(i)).read()
        if spec.limit is not None:
            table = _first_per_source(table, spec.limit)
        tables.append(table)
        counts += [spec.samples or config.samples] * len(select_tasks(table, config))
    return pa.concat_tables(tables, promote_options="default"), counts


def task_counts(b: Build, config: EvalConfig) -> dict[str, int]:
    """Tasks per benchmark (task.v1 ``source``) in the task sets, before any limit or family filter."""
    counts: dict[str, int] = {}
    tables = [b.optional("tasks")] + [
        b.table(BENCHMARK_INPUT.format(i)) for i in range(len(config.benchmarks))
    ]
    for table in tables:
        if isinstance(table, TableInput):
            for source in table.read(["source"]).column("source").to_pylist():
                counts[source] = counts.get(source, 0) + 1
    return counts


def _first_per_source(table: pa.Table, limit: int) -> pa.Table:
    seen: dict[str, int] = {}
    keep = []
    for source in table.column("source").to_pylist():
        seen[source] = seen.get(source, 0) + 1
        keep.append(seen[source] <= limit)
    return table.filter(pa.array(keep))


def _build(b: Build) -> None:
    config: EvalConfig = b.step.config
    tools = ToolsConfig.model_validate(b.step.identity["tools"])
    model = b.model("model")
    found = trained_on(model.ref.uri, b.store.settings) if model.ref is not None else None
    trained = of_conversion(found.uri, found.config) if found is not None else None
    prompts = prompt_format(config.prompt_style, config.variants, trained)  # the model's, unless set
    config = config.model_copy(update={"prompt_style": prompts.style, "variants": dict(prompts.variants)})
    b.writer.extra_lineage["prompts"] = prompts.lineage()
    tasks, counts = task_plan(b, config)
    in_sets = task_counts(b, config)
    generator = open_generator(config, model.local_path())
    if config.tool_record is not None:
        tools = tools.model_copy(update={"record": config.tool_record})
    root = config.recording or (b.store.root if "://" not in b.store.root else None)
    collection = read_collection(b.optional(ENCYCLOPEDIA))
    # before the first task: a dead search endpoint (or a local search with nothing to serve) fails now
    check_tools(tools, "evaluate.tools", collection)
    ledger = LedgerToolBox(
        build_toolbox(tools, root, config.leak_guard.blocked_hosts, collection, "evaluate.tools"),
        tools.record if root is not None else "off",
        root if tools.record != "off" else None,
    )
    judge = None
    if config.judge is not None:
        from coa.scoring.judge import LLMJudge, judge_prompt

        judge = LLMJudge(config.judge)
        judge.check()  # before the first task: a dead or wrong judge endpoint fails in seconds
        b.writer.extra_lineage["judge"] = {"model": judge.model, "prompt_version": judge_prompt()["version"]}
    try:
        result = evaluate_tasks(tasks, generator, ledger, config, b.progress, counts, judge)
    finally:
        close = getattr(generator, "close", None)
        if close is not None:
            close()
        if judge is not None:
            judge.close()
    tools_used = ledger.summary()
    document = metrics_document(
        result, config.prices, coverage=coverage_of(in_sets, result), tools=tools_used
    )
    b.writer.write_table(EVAL_TABLE, result, schemas.EVAL)
    b.writer.write_file(METRICS_FILE, json.dumps(document, indent=2, sort_keys=True))
    b.writer.write_file(
        REPORT_FILE,
        render_eval_report(
            title=f"Evaluation: {model.name}",
            student=document["benchmarks"],
            facts={
                "model": model.name,
                "samples per task": config.samples,
                "families": _families(document),
                "tools": f"{tools_used['mode']} (record={tools_used['record']}, "
                f"recording={tools_used['recording']})",
            },
            document=document,
        ),
    )
    b.writer.extra_lineage["model"] = model.name
    b.writer.extra_lineage["tools"] = tools_used
    b.writer.extra_lineage["scorers"] = document["scorers"]
    b.report(
        EvalSummary(
            metrics=document["families"],
            benchmarks=document["benchmarks"],
            headline=headline(model.name, document["benchmarks"], coverage=document["coverage"]),
            report=io.join(b.writer.uri, REPORT_FILE),
        )
    )


def _families(document: dict[str, Any]) -> str:
    return ", ".join(f for f in document["families"] if f != "all")


def predictions_step(
    config: EvalConfig, tasks: StepInput | None, predictions: list[str], name: str = "evaluate"
) -> Step:
    """An ``eval`` artifact from prediction files (:mod:`coa.evaluate.predictions`) instead of a model:
    the same task selection, scorers, metrics and report as :func:`step`. The files' hashes are part
    of the key."""
    from coa.evaluate.predictions import PredictionsError, file_digest

    if tasks is None and not config.benchmarks:
        raise UserError("evaluate: no tasks (give a task table or name benchmarks in evaluate.benchmarks)")
    files = []
    for path in predictions:
        try:
            files.append({"path": str(path), "sha256": file_digest(path)})
        except OSError as e:
            raise PredictionsError(f"cannot read predictions file {path}: {e.strerror}") from None
    base = step(config, ToolsConfig(enabled=()), tasks, ModelInput(external="predictions"), name)
    inputs = {k: v for k, v in base.inputs.items() if k not in ("model", ENCYCLOPEDIA)}
    identity = {"predictions": files} | (
        {"judge_prompt": base.identity["judge_prompt"]} if "judge_prompt" in base.identity else {}
    )
    return PREDICTIONS.step(config, inputs, name=name, identity=identity)


def _build_predictions(b: Build) -> None:
    from coa.evaluate.predictions import PredictionsError, file_digest, score_prediction_files

    config: EvalConfig = b.step.config
    files = b.step.identity["predictions"]
    for f in files:
        if file_digest(f["path"]) != f["sha256"]:
            raise PredictionsError(f"{f['path']} changed after the step was planned; run it again")
    tasks, _ = task_plan(b, config)
    judge = None
    if config.judge is not None:
        from coa.scoring.judge import LLMJudge, judge_prompt

        judge = LLMJudge(config.judge)
        judge.check()  # before the first task: a dead or wrong judge endpoint fails in seconds
        b.writer.extra_lineage["judge"] = {"model": judge.model, "prompt_version": judge_prompt()["version"]}
    try:
        result, document = score_prediction_files(
            select_tasks(tasks, config), [f["path"] for f in files], judge=judge, scorers=config.scorers,
            in_sets=task_counts(b, config),
        )  # fmt: skip
    finally:
        if judge is not None:
            judge.close()
    b.writer.write_table(EVAL_TABLE, result, schemas.EVAL)
    b.writer.write_file(METRICS_FILE, json.dumps(document, indent=2, sort_keys=True))
    model = str(result.column("model")[0]) if result.num_rows else "predictions"
    b.writer.write_file(
        REPORT_FILE,
        render_eval_report(
            title=f"Evaluation of predictions: {model}",
            student=document["benchmarks"],
            facts={"predictions": ", ".join(f"{f['path']} (sha256 {f['sha256'][:12]})" for f in files)},
            document=document,
        ),
    )
    b.writer.extra_lineage["model"] = model
    b.writer.extra_lineage["predictions"] = document["predictions"]
    b.writer.extra_lineage["scorers"] = document["scorers"]
    b.report(
        EvalSummary(
            metrics=document["families"],
            benchmarks=document["benchmarks"],
            headline=headline(model, document["benchmarks"], coverage=document["coverage"]),
            report=io.join(b.writer.uri, REPORT_FILE),
        )
    )


def eval_report_step(
    name: str,
    candidate: StepInput,
    teacher: StepInput | None = None,
    tasks: StepInput | None = None,
    baseline: StepInput | None = None,
    bootstrap_samples: int = 2000,
) -> Step:
    """The evaluation report of ``candidate`` (eval.v1), beside the ``teacher``'s runs
    (trajectory.v1) on the same ``tasks`` and a paired comparison with a ``baseline`` evaluation."""
    if teacher is not None and tasks is None:
        raise UserError("the teacher's runs need the task table they ran on (tasks)")
    inputs = {"candidate": candidate, "teacher": teacher, "tasks": tasks, "baseline": baseline}
    config = EvalReportConfig(bootstrap_samples=bootstrap_samples)
    return EVAL_REPORT.step(config, inputs, name=name, artifact=name)


def _build_eval_report(b: Build) -> None:
    from coa.evaluate.compare import compare
    from coa.evaluate.metrics import COMPUTATION, benchmark_metrics
    from coa.evaluate.teacher_comparison import teacher_eval_table, token_comparison

    candidate = b.table("candidate")
    rows = candidate.read()
    model = str(rows.column("model")[0]) if rows.num_rows else candidate.uri
    student = benchmark_metrics(rows)
    teacher = comparison = None
    if (runs := b.optional("teacher")) is not None:
        tasks = b.table("tasks").read()
        teacher = benchmark_metrics(teacher_eval_table(runs.read(), tasks))  # type: ignore[union-attr]
        comparison = token_comparison(student, teacher)
    deltas = None
    if (base := b.optional("baseline")) is not None:
        found = compare(rows, base.read(), samples=b.step.config.bootstrap_samples)  # type: ignore[union-attr]
        deltas = {k: d.as_dict() for k, d in found.items()}
    facts = {"candidate": candidate.uri}
    if base is not None:
        facts["baseline"] = base.ref.uri if isinstance(base, TableInput) else str(base)
        from coa.evaluate.compare import scorer_mismatch

        for bench, (cand_scorers, base_scorers) in scorer_mismatch(rows, base.read()).items():  # type: ignore[union-attr]
            facts[f"warning: {bench}"] = (
                f"scored by {', '.join(cand_scorers)} here but by {', '.join(base_scorers)} in the baseline: "
                "the delta mixes two rules (re-score the baseline with `coa score`)"
            )
    page = render_eval_report(
        title=f"Evaluation report: {model}", student=student, teacher=teacher,
        comparison=comparison or (), deltas=deltas, facts=facts,
        document={"scorers": scorers_used(rows), "computation": COMPUTATION, "benchmarks": student},
    )  # fmt: skip
    b.writer.write_file(REPORT_FILE, page)
    b.writer.write_file(
        "comparison.json",
        json.dumps(
            {"student": student, "teacher": teacher, "tokens": comparison, "baseline": deltas}, indent=2
        ),
    )
    # the tracker's run gets the token reduction against the teacher (coa.tracking)
    tokens = {"tokens_vs_teacher": {row["benchmark"]: row for row in comparison}} if comparison else {}
    b.report(
        EvalReportSummary(
            headline=headline(model, student, comparison or (), deltas),
            report=io.join(b.writer.uri, REPORT_FILE),
            **tokens,
        )
    )


def report_step(
    run_name: str,
    tasks: StepInput,
    before: StepInput,
    after: StepInput | None,
    sft: StepInput | None,
    teacher: StepInput | None,
    name: str = "report",
    after_rl: StepInput | None = None,
    rl: StepInput | None = None,
    rounds: Mapping[int, tuple[StepInput, StepInput]] | None = None,
) -> Step:
    """The training report over the evaluations before/after SFT (and after RL) and the teacher's runs.

    ``rounds``: round (2..) → (its held-out evaluation, its SFT model), from self-improvement rounds
    (``rounds: N``); inputs ``after_r<round>`` and ``sft_r<round>``, a column per round."""
    inputs = {"tasks": tasks, "before": before, "after": after, "sft": sft, "teacher": teacher}
    if after_rl is not None:  # only then, so a plan without RL keeps its content key
        inputs |= {"after_rl": after_rl, "rl": rl}
    for r, (evaluation, model) in sorted((rounds or {}).items()):
        inputs |= {f"{ROUND_EVAL}{r}": evaluation, f"{ROUND_MODEL}{r}": model}
    return REPORT.step(ReportConfig(run_name=run_name), inputs, name=name, artifact=run_name)


def _build_report(b: Build) -> None:
    comparison, changes = write_training_report(b)
    b.report(
        TrainingReportSummary(
            comparison=tuple(comparison), changes=tuple(changes), report=io.join(b.writer.uri, "report.html")
        )
    )


STAGE = Stage(
    name="evaluate",
    kind="eval",
    build=_build,
    config=EvalConfig,
    expects={"tasks": "task.v1", BENCHMARK_INPUT.format("*"): "task.v1", ENCYCLOPEDIA: "document.v1"},
    produces={EVAL_TABLE: "eval.v1"},
    summary=EvalSummary,
    identify=identify,
    describe="the model on the tasks with real tools",
    runs_model=True,
)
PREDICTIONS = Stage(
    name="evaluate.predictions",
    kind="eval",
    build=_build_predictions,
    config=EvalConfig,
    expects=STAGE.expects,
    produces={EVAL_TABLE: "eval.v1"},
    summary=EvalSummary,
    describe="prediction files scored against the tasks",
)
EVAL_REPORT = Stage(
    name="eval-report",
    kind="eval-report",
    build=_build_eval_report,
    config=EvalReportConfig,
    expects={"candidate": "eval.v1", "teacher": "trajectory.v1", "tasks": "task.v1", "baseline": "eval.v1"},
    summary=EvalReportSummary,
    describe="HTML evaluation report (benchmarks, pass@k, tokens vs the teacher, baseline deltas)",
)
REPORT = Stage(
    name="report",
    kind="report",
    build=_build_report,
    config=ReportConfig,
    expects={
        "tasks": "task.v1",
        "before": "eval.v1",
        "after": "eval.v1",
        "teacher": "trajectory.v1",
        "after_rl": "eval.v1",
        f"{ROUND_EVAL}*": "eval.v1",
    },  # fmt: skip
    summary=TrainingReportSummary,
    describe="HTML training report (before/after SFT vs the teacher)",
)
