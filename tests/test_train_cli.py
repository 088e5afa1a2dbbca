"""`coa model init`, `coa sft` and `coa evaluate` from the command line, on a small converted artifact."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import schemas
from coa import io
from coa.cli import app
from tests.train.rows import arith_rows

runner = CliRunner()
TINY = [
    "student.tiny={vocab_size: 400, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 2, "
    "intermediate_size: 64}",
    "sft.time_budget_s=null",
    "sft.max_steps=3",
    "sft.logging_steps=1",
    "evaluate.max_turns=2",
    "evaluate.max_new_tokens=8",
    "evaluate.max_total_tokens=16",
    "evaluate.limit_per_family=2",
]


def test_model_init_sft_and_evaluate(storage_root: Path) -> None:
    store = io.Store()
    writer = store.writer("converted", "coa", {"cli": 1})
    writer.write_table("sft", arith_rows(24, seed=3), schemas.SFT)
    converted = writer.commit()
    built = runner.invoke(app, ["model", "init", "--data", converted.uri, *TINY])
    assert built.exit_code == 0, built.output
    model_uri = built.output.split("model: ", 1)[1].split()[0]
    assert "parameters, vocabulary" in built.output and io.lookup(model_uri).kind == "model"

    tuned = runner.invoke(app, ["sft", "--data", converted.uri, "--model", model_uri, *TINY])
    assert tuned.exit_code == 0, tuned.output
    tuned_uri = tuned.output.split("model: ", 1)[1].split()[0]
    assert "| 3 / 3 |" in tuned.output  # steps run / planned, as the SFT stage presents them
    assert json.loads(io.read_file(tuned_uri, "sft_result.json"))["global_step"] == 3

    tasks = runner.invoke(
        app,
        [
            "tasks",
            "synthetic",
            "synthetic.train={arithmetic: 1}",
            "synthetic.heldout={arithmetic: 2, multihop: 1}",
        ],
    )
    assert tasks.exit_code == 0, tasks.output
    tasks_uri = tasks.stdout.strip().splitlines()[-1]
    scored = runner.invoke(app, ["evaluate", "--model", tuned_uri, "--tasks", tasks_uri, *TINY])
    assert scored.exit_code == 0, scored.output
    assert "format-valid" in scored.output and "math" in scored.output and "mhqa" in scored.output
    eval_uri = scored.output.split("eval: ", 1)[1].split()[0]
    assert io.open_artifact(eval_uri).rows("eval") == 3


def test_sft_fails_clearly_without_data_or_section(storage_root: Path, tmp_path: Path) -> None:
    missing = runner.invoke(app, ["sft", "--data", str(storage_root / "nope")])
    assert missing.exit_code == 2 and "no artifact at" in missing.output
    writer = io.Store().writer("converted", "coa", {"cli": 2})
    writer.write_table("sft", arith_rows(4, seed=3), schemas.SFT)
    converted = writer.commit()
    config = tmp_path / "p.yaml"
    config.write_text("run_name: x\n")
    result = runner.invoke(app, ["sft", "--data", converted.uri, "-c", str(config)])
    assert result.exit_code == 2 and "no sft section" in " ".join(result.output.split())
