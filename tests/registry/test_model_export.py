"""``coa models export``: a promoted tiny model becomes a Hugging Face folder with a model card.

The lineage is built in the store as the pipeline writes it (tasks → curate with its summary →
convert with ``sft`` examples → an SFT model whose ``model/`` is a real tiny Qwen2), the evaluation
artifact holds ``eval.v1`` rows and the ``metrics.json`` the evaluate step computes from them, and a
training report compares its tokens with the teacher's. The folder must load with
``from_pretrained``; the card must parse as a Hugging Face model card (metadata included) and state
the evaluation artifact's figures exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import schemas
from coa import io
from coa.cli import app
from coa.evaluate.metrics import metrics_document
from coa.model import TinyModelConfig, init_model, sft_corpus
from coa.registry.model_card import Z95
from coa.registry.store import Registry
from tests.registry import helpers
from tests.train.rows import arith_rows

TINY = TinyModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)
BASE = "Qwen/Qwen2.5-0.5B-Instruct"
CORRECT = {  # benchmark -> per task, two samples each
    "aime24": [[True, False], [True, True], [False, False], [True, False]],
    "math500": [[True, True], [False, True], [False, False]],
}


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(sft_corpus(arith_rows(120, seed=1)), TINY, tmp_path_factory.mktemp("tiny") / "model")


def _chain(tiny_folder: Path) -> dict[str, Any]:
    """tasks → curate → convert → model → eval → report, committed in the test's store."""
    store = io.Store()
    tasks = helpers.tasks()
    summary = {
        "rows_in": 40, "rows_kept": 30, "rows_quarantined": 10, "kept_tasks": 4,
        "reasons": {"incorrect": 6, "contaminated_question": 3, "exact_duplicate": 1},
    }  # fmt: skip
    writer = store.writer(
        "curated",
        "curated",
        {"config": {"decontam": {"benchmarks": ["file:///bench/aime24"]}}, "identity": {}},
        upstream=[tasks],
        extra_lineage={
            "step": "curate",
            "inputs": {"raw": {"uri": tasks.uri, "table": "train"}},
            "gate": {"success": True, "failed": []},
        },
    )
    writer.write_table(
        "trajectories",
        helpers.rows(
            schemas.TRAJECTORY, [{"run_id": "r1", "task_id": "t0", "family": "math", "status": "completed"}]
        ),
        schemas.TRAJECTORY,
    )
    writer.write_file("summary.json", json.dumps(summary))
    curated = writer.commit()
    writer = store.writer(
        "converted", "converted", {"n": 8}, upstream=[curated],
        extra_lineage={
            "step": "convert", "inputs": {"curated": {"uri": curated.uri, "table": "trajectories"}}
        },
    )  # fmt: skip
    writer.write_table("sft", arith_rows(8, seed=2), schemas.SFT)
    converted = writer.commit()
    writer = store.writer(
        "model",
        "student",
        {"tag": "export"},
        upstream=[converted],
        extra_lineage={
            "step": "sft",
            "inputs": {"data": {"uri": converted.uri, "table": "sft"}, "base": {"uri": None, "model": BASE}},
            "steps_run": 40,
            "steps_planned": 40,
        },
    )
    for path in sorted(tiny_folder.iterdir()):
        writer.write_file(f"model/{path.name}", path.read_bytes())
    model = writer.commit()
    items = [
        {
            "eval_id": f"{bench}-{t}-{s}", "model": model.uri, "task_id": f"{bench}-{t}", "benchmark": bench,
            "family": "math", "sample_index": s, "correct": ok, "score": float(ok),
            "format_valid": ok or s == 0,
            "prediction": "42" if ok else "7", "completion_tokens": 100 + 10 * t + s, "total_tokens": 300 + t,
            "n_tool_calls": 1 + s, "prompt_tokens": 50,
        }
        for bench, tasks_ok in CORRECT.items()
        for t, samples in enumerate(tasks_ok)
        for s, ok in enumerate(samples)
    ]  # fmt: skip
    table = helpers.rows(schemas.EVAL, items)
    document = metrics_document(table)
    writer = store.writer(
        "eval", "eval", {"for": model.uri}, upstream=[tasks, model],
        extra_lineage={"step": "evaluate", "inputs": {"model": {"uri": model.uri, "model": model.uri}}},
    )  # fmt: skip
    writer.write_table("eval", table, schemas.EVAL)
    writer.write_file("metrics.json", json.dumps(document, indent=2, sort_keys=True))
    evaluation = writer.commit()
    rows = [{"family": "math", "tokens_per_task_after": 301.5, "teacher_tokens_per_task": 2116.0}]
    writer = store.writer(
        "report", "demo", {"after": evaluation.uri}, upstream=[evaluation],
        extra_lineage={"step": "report", "inputs": {"after": {"uri": evaluation.uri, "table": "eval"}}},
    )  # fmt: skip
    writer.write_file("comparison.json", json.dumps(rows))
    report = writer.commit()
    return {"model": model, "eval": evaluation, "metrics": document, "report": report}


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_champion_exports_to_a_loadable_folder_whose_card_states_the_evaluation(
    tiny_folder: Path, tmp_path: Path
) -> None:
    from huggingface_hub import ModelCard
    from transformers import AutoModelForCausalLM, AutoTokenizer

    chain = _chain(tiny_folder)
    Registry().promote(
        "coa-agent",
        chain["model"].uri,
        verdict={"promote": True},
        evaluations={"candidate": chain["eval"].uri},
    )
    out = tmp_path / "export" / "coa-agent"
    result = _invoke("models", "export", "champion:coa-agent", str(out))
    assert result.exit_code == 0, result.output

    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.num_parameters() > 0 and AutoTokenizer.from_pretrained(out).vocab_size > 0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no staging folder left

    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "transformers" and card.data.license == "other"  # a hub base
    assert card.data.base_model == [BASE] and "chain-of-agents" in card.data.tags
    assert card.data.datasets == ["synthetic"]
    benchmarks = chain["metrics"]["benchmarks"]
    stated: dict[tuple[str, str], Any] = {
        (r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results
    }
    for bench, m in benchmarks.items():
        for key in ("pass@1", "pass@1_se", "pass@2", "maj@2", "format_valid", "tokens_per_task"):
            assert stated[(bench, key)] == m[key], (bench, key)  # exactly, as metrics.json holds it
    assert {b for b, _ in stated} == set(benchmarks)

    text = card.text
    for bench, m in benchmarks.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {bench} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == str(m["tasks"]) and cells[2] == str(m["samples"])
        assert cells[3] == f"{m['pass@1'] * 100:.1f}% ± {m['pass@1_se'] * 100:.1f}%"
        low, high = max(0.0, m["pass@1"] - Z95 * m["pass@1_se"]), min(1.0, m["pass@1"] + Z95 * m["pass@1_se"])
        assert cells[4] == f"[{low * 100:.1f}%, {high * 100:.1f}%]"
        assert f"{m['pass@2'] * 100:.1f}%" in cells and f"{m['maj@2'] * 100:.1f}%" in cells
    root = str(io.Store().root).rstrip("/") + "/"
    assert chain["eval"].uri.startswith(root) and root not in text  # no local store path in the card
    assert chain["eval"].uri.removeprefix(root) in text and chain["report"].uri.removeprefix(root) in text
    assert "| math | 301.5 | 2,116.0 | 85.8% |" in text  # 1 - 301.5 / 2116
    assert "40 teacher runs in, 30 kept, 10 quarantined (25.0%)" in text
    assert "3 runs quarantined as contaminated" in text and "file:///bench/aime24" in text
    assert "**Variant `code_math`** (prompt `test-v1`" in text and "Solve the task with tools." in text
    assert "vllm serve" in text and "optimizer steps 40 of 40 planned" in text
    lineage = json.loads((out / "coa_lineage.json").read_text())
    assert lineage["root"] == chain["model"].uri.removeprefix(root) and root not in json.dumps(lineage)


def test_export_refuses_what_it_cannot_describe(tiny_folder: Path, tmp_path: Path) -> None:
    chain = _chain(tiny_folder)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("keep me")
    refused = _invoke("models", "export", chain["model"].uri, str(taken))
    assert refused.exit_code == 2 and "not an empty folder" in refused.output
    assert (taken / "x").read_text() == "keep me"
    not_a_model = _invoke("models", "export", chain["eval"].uri, str(tmp_path / "a"))
    assert not_a_model.exit_code == 2 and "not a model" in not_a_model.output
    folder = _invoke("models", "export", str(tiny_folder), str(tmp_path / "b"))
    assert folder.exit_code == 2 and "not a committed model artifact" in folder.output
    nobody = _invoke("models", "export", "champion:nobody", str(tmp_path / "c"))
    assert nobody.exit_code == 2 and "no champion" in nobody.output
    # without a registry entry the newest evaluation of the model is found through its lineage
    plain = _invoke("models", "export", chain["model"].uri, str(tmp_path / "d"))
    assert plain.exit_code == 0, plain.output
    card = (tmp_path / "d" / "README.md").read_text()
    assert "the newest evaluation artifact whose input model is this model" in card
    assert re.search(r"^license: other$", card, re.M)
