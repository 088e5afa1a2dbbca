"""``coa score`` and ``coa evaluate --predictions``: the same numbers from the same prediction files.

Predictions are written from the fixtures' gold answers with rewritings whose verdict each
benchmark's rule fixes (GAIA: ``2.00`` for ``2`` right, ``the 519`` wrong; NQ: the first of several
answers counts; AIME: a boxed answer), over two samples, with some tasks left without a prediction.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coa import io
from coa.cli import app
from coa.errors import UserError
from coa.evaluate.predictions import PredictionsError, predictions_table, read_prediction_rows
from coa.tasksets import import_tasks
from coa.tasksets.config import TaskSourceConfig
from tests.tools.support import requires_sandbox

runner = CliRunner()
LIMIT = 12


def _tasks(path: Path) -> list[dict[str, Any]]:
    return import_tasks([TaskSourceConfig(path=str(path))]).tasks.to_pylist()[:LIMIT]


def _rewrite(task: dict[str, Any], sample: int, i: int) -> str | None:
    gold = task["gold_answers"][0]
    if i % 5 == 4:
        return None  # no prediction for this task
    if task["family"] == "math":
        return f"\\boxed{{{gold}}}" if (i + sample) % 3 else f"\\boxed{{{gold}1}}"
    if task["family"] == "mhqa":
        return f"{gold} | something else" if (i + sample) % 2 else f"something else | {gold}"
    return gold if (i + sample) % 2 else f"the {gold}"


def write_predictions(tasks: list[dict[str, Any]], path: Path, native_ids: bool = False) -> Path:
    with path.open("w") as fh:
        for sample in (0, 1):
            for i, task in enumerate(tasks):
                prediction = _rewrite(task, sample, i)
                if prediction is None:
                    continue
                task_id = task["task_id"].split(":", 1)[1] if native_ids else task["task_id"]
                fh.write(
                    json.dumps({"task_id": task_id, "prediction": prediction, "sample_index": sample}) + "\n"
                )
    return path


@pytest.mark.parametrize(
    ("fixture", "benchmark", "scorer", "label"),
    [("gaia_dev_103.json", "gaia_dev_103", "gaia", "gaia v1"),
     ("nq_500.jsonl", "nq_500", "afm-mhqa-em", "afm-mhqa-em v1"),
     ("aime24.parquet", "aime24", "afm-math-verify", "afm-math-verify v2 (math-verify 0.9.0)")],
)  # fmt: skip
def test_coa_score_equals_coa_evaluate_on_the_same_predictions(
    fixture: str, benchmark: str, scorer: str, label: str, afm_fixtures: Path, tmp_path: Path
) -> None:
    imported = runner.invoke(app, ["tasks", "import", str(afm_fixtures / fixture)])
    assert imported.exit_code == 0, imported.output
    tasks_uri = imported.stdout.strip().splitlines()[-1].split()[-1]
    tasks = _tasks(afm_fixtures / fixture)
    predictions = write_predictions(
        tasks, tmp_path / "predictions.jsonl", native_ids=benchmark == "gaia_dev_103"
    )
    out = tmp_path / "score.json"
    scored = runner.invoke(
        app,
        [
            "score",
            "--predictions",
            str(predictions),
            "--tasks",
            tasks_uri,
            "--limit",
            str(LIMIT),
            "--out",
            str(out),
        ],
    )
    assert scored.exit_code == 0, scored.output
    assert f"{benchmark}: scored by {label}; {LIMIT} of " in scored.stdout  # the package beside the number
    from_file = runner.invoke(
        app, ["score", "-p", str(predictions), "--tasks", str(afm_fixtures / fixture), "--limit", str(LIMIT)]
    )
    assert from_file.exit_code == 0 and from_file.stdout.splitlines()[:4] == scored.stdout.splitlines()[:4]
    evaluated = runner.invoke(
        app, ["evaluate", "--predictions", str(predictions), "--tasks", tasks_uri, "--limit", str(LIMIT)]
    )
    assert evaluated.exit_code == 0, evaluated.output
    uri = evaluated.stdout.splitlines()[0].split()[-1]
    committed = json.loads(io.read_file(io.open_artifact(uri), "metrics.json"))
    printed = json.loads(out.read_text())
    for key in ("families", "benchmarks", "scorers", "coverage", "predictions"):
        assert committed[key] == printed[key], key
    metrics = printed["benchmarks"][benchmark]
    rows = io.read_table(io.open_artifact(uri), "eval").to_pylist()
    assert metrics["tasks"] == LIMIT and metrics["samples"] == 2 and len(rows) == 2 * LIMIT
    assert metrics["pass@1"] == sum(r["correct"] for r in rows) / len(rows)
    assert {r["scorer"] for r in rows} == {scorer}
    assert printed["predictions"]["runs_without_prediction"] == 2 * len(range(4, LIMIT, 5))
    expected = _expected(tasks)
    assert [r["correct"] for r in sorted(rows, key=lambda r: (r["sample_index"], r["task_id"]))] == [
        expected[(s, t["task_id"])] for s in (0, 1) for t in sorted(tasks, key=lambda t: t["task_id"])
    ]


def _expected(tasks: list[dict[str, Any]]) -> dict[tuple[int, str], bool]:
    """Each rewriting's verdict under the benchmark's rule (written from the rule, not the scorer)."""
    out = {}
    for sample in (0, 1):
        for i, task in enumerate(tasks):
            if i % 5 == 4:
                verdict = False
            elif task["family"] in ("math", "mhqa"):
                verdict = bool((i + sample) % 3) if task["family"] == "math" else bool((i + sample) % 2)
            else:  # GAIA: the gold right, "the <gold>" wrong (a number is no float, a string gains "the")
                verdict = bool((i + sample) % 2)
            out[(sample, task["task_id"])] = verdict
    return out


def test_afm_round_files_are_matched_by_question_and_round(afm_fixtures: Path, tmp_path: Path) -> None:
    tasks = _tasks(afm_fixtures / "gaia_dev_103.json")
    for r in (0, 1, 2):
        with (tmp_path / f"gaia.round_{r}.jsonl").open("w") as fh:
            for i, task in enumerate(tasks[:5]):
                gold = task["gold_answers"][0]
                row = {"question_id": i, "question": task["question"], "Level": 1, "golden_answer": gold,
                       "prediction": gold if r == i % 3 else "no idea", "llm_judge": 0,
                       "steps": [], "status": "ok", "error": None, "raw": ""}  # fmt: skip
                fh.write(json.dumps(row) + "\n")
    paths = sorted(tmp_path.glob("gaia.round_*.jsonl"))
    rows = read_prediction_rows(paths)
    assert {r["sample_index"] for r in rows} == {0, 1, 2}
    table = predictions_table(tasks, rows, "afm").to_pylist()
    assert len(table) == 3 * len(tasks)  # every task of the set counts, with or without a prediction
    per_task = {t["task_id"]: sum(r["correct"] for r in table if r["task_id"] == t["task_id"]) for t in tasks}
    assert [per_task[t["task_id"]] for t in tasks] == [1] * 5 + [0] * (len(tasks) - 5)
    from coa.evaluate.metrics import metrics_document

    m = metrics_document(predictions_table(tasks, rows, "afm"))["benchmarks"]["gaia_dev_103"]
    assert m["samples"] == 3 and m["pass@1"] == 5 / (3 * len(tasks))
    assert m["pass@3"] == 5 / len(tasks)  # AFM's Pass@3: any of the 3 rounds correct


def test_bad_prediction_files_fail_in_one_line(afm_fixtures: Path, tmp_path: Path) -> None:
    tasks = _tasks(afm_fixtures / "gaia_dev_103.json")
    stray = tmp_path / "stray.jsonl"
    stray.write_text(json.dumps({"task_id": "nope", "prediction": "1"}) + "\n")
    with pytest.raises(PredictionsError, match="matches no task"):
        predictions_table(tasks, read_prediction_rows([stray]), "x")
    twice = write_predictions(tasks, tmp_path / "p.jsonl")
    with pytest.raises(PredictionsError, match="two predictions for task"):
        predictions_table(tasks, read_prediction_rows([twice, twice]), "x")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x"}\n')
    with pytest.raises(UserError, match="needs a 'prediction' key"):
        read_prediction_rows([bad])
    result = runner.invoke(app, ["score", "-p", str(bad), "--tasks", str(afm_fixtures / "gaia_dev_103.json")])
    assert result.exit_code == 2 and "needs a 'prediction' key" in result.output


def test_scorer_mismatch_between_evaluations_is_named(afm_fixtures: Path, tmp_path: Path) -> None:
    import schemas
    from coa.evaluate.compare import scorer_mismatch

    tasks = _tasks(afm_fixtures / "gaia_dev_103.json")
    rows = read_prediction_rows([write_predictions(tasks, tmp_path / "p.jsonl")])
    gaia = predictions_table(tasks, rows, "m")
    project = predictions_table(tasks, rows, "m", scorers={"gaia_dev_103": "coa-web"})
    old = schemas.EVAL.conform(gaia.drop_columns(["scorer", "scorer_version", "score_detail"]))
    assert scorer_mismatch(gaia, gaia) == {}
    assert scorer_mismatch(gaia, project) == {"gaia_dev_103": (["gaia v1"], ["coa-web v1"])}
    assert scorer_mismatch(gaia, old) == {"gaia_dev_103": (["gaia v1"], ["unrecorded"])}
    assert old.column("scorer").null_count == old.num_rows  # an older table reads with nulls there
    assert [r["correct"] for r in gaia.to_pylist()] != [r["correct"] for r in project.to_pylist()]


@pytest.mark.sandbox
@requires_sandbox
def test_coa_score_on_livecodebench_names_lcbs_package(afm_fixtures: Path, tmp_path: Path) -> None:
    tasks = _tasks(afm_fixtures / "livecodebench_v5.parquet")[:3]
    predictions = tmp_path / "lcb.jsonl"
    lines = [{"task_id": t["task_id"], "prediction": "```python\nprint(0)\n```"} for t in tasks]
    predictions.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "metrics.json"
    args = ["score", "-p", str(predictions), "--tasks", str(afm_fixtures / "livecodebench_v5.parquet")]
    scored = runner.invoke(app, [*args, "--limit", "3", "--out", str(out)])
    assert scored.exit_code == 0, scored.output
    assert (
        "livecodebench_v5: scored by livecodebench v2 (nvidia-livecodebench 26.3); 3 of 167" in scored.stdout
    )
    used = json.loads(out.read_text())["scorers"]["livecodebench_v5"]["scorers"]
    assert used == [{"name": "livecodebench", "version": "2", "rule": used[0]["rule"], "published_rule": True,
                     "package": "nvidia-livecodebench 26.3"}]  # fmt: skip
    assert json.loads(out.read_text())["benchmarks"]["livecodebench_v5"]["pass@1"] == 0.0
