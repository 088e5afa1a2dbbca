"""The stage commands are generated from the stage table (:mod:`coa._cli.stages`): every stage has
``coa stage NAME`` offering its inputs, today's names keep their options, and a generated command
runs its stage through the one runner (the same artifact whichever name ran it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import schemas
from coa import io
from coa._cli.commands import ALIASES, COMMANDS
from coa._cli.stages import STAGE_GROUP, commands_under, offered
from coa.cli import app
from coa.plan.stages import STAGES

runner = CliRunner()
WIDE = {"COLUMNS": "240"}  # help lines unwrapped: every option name on one line
TINY = ["synthetic.train={arithmetic: 2}", "synthetic.heldout={arithmetic: 1}"]

KEPT = {
    "tasks import": ["--family", "--name", "--limit", "--artifact"],
    "tasks synthetic": ["--config", "-c"],
    "collect": ["--tasks", "--table", "--retry-failed", "--encyclopedia", "--config"],
    "curate": ["--raw", "--tasks", "--table", "--config"],
    "convert": ["--curated", "--tasks", "--table", "--config"],
    "model init": ["--data", "--config"],
    "sft": ["--data", "--model", "--config"],
    "rl": ["--data", "--model", "--eval", "--encyclopedia", "--config"],
    "evaluate": ["--model", "--tasks", "--table", "--limit", "--samples", "--predictions", "--encyclopedia"],
    "eval-report": ["--baseline", "--teacher", "--tasks"],
}
"""The stage commands' names and options before they were generated (docs and scripts use them)."""


def _help(*path: str) -> str:
    shown = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert shown.exit_code == 0, shown.output
    return shown.output


def test_every_stage_has_a_generated_command_that_offers_its_inputs() -> None:
    assert commands_under(STAGE_GROUP) == list(STAGES) == list(COMMANDS)
    listed = _help(STAGE_GROUP)
    for name, stage in STAGES.items():
        assert name in listed
        shown = _help(STAGE_GROUP, name)
        assert stage.describe[1:] in " ".join(shown.split())
        for role in offered(stage, COMMANDS[name]):
            assert f"--{role.replace('_', '-')}" in shown or role == COMMANDS[name].argument, (name, role)


@pytest.mark.parametrize("path", list(KEPT))
def test_todays_names_keep_their_options(path: str) -> None:
    assert path in dict(ALIASES)
    shown = _help(*path.split())
    assert all(option in shown for option in KEPT[path]), (path, shown)


def test_a_generated_command_runs_its_stage_and_a_kept_name_reuses_its_artifact(storage_root: Path) -> None:
    made = runner.invoke(app, [STAGE_GROUP, "synthetic", *TINY])
    assert made.exit_code == 0, made.output
    tasks = made.stdout.strip().splitlines()[-1]  # a task set's bare URI, last
    again = runner.invoke(app, ["tasks", "synthetic", *TINY])  # today's name: the same command
    assert again.exit_code == 0 and again.stdout.strip().splitlines()[-1] == tasks
    assert f"reused committed artifact {tasks}" in "".join(again.stderr.split("\n"))

    # a stage no command ran before: tonight's new tasks beside an earlier night's collection (empty)
    writer = io.Store().writer("trajectories", "night0", {"night": 0})
    writer.write_table("trajectories", schemas.TRAJECTORY.empty_table(), schemas.TRAJECTORY)
    night = writer.commit().uri
    fresh = runner.invoke(app, [STAGE_GROUP, "nightly.new_tasks", "--tasks", tasks, "--previous", night])
    assert fresh.exit_code == 0, fresh.output
    new = io.open_artifact(fresh.stdout.strip().splitlines()[-1])
    assert new.kind == "tasks" and new.rows("tasks") == io.open_artifact(tasks).rows("train") == 2
    lineage = io.read_lineage(new)["inputs"]
    assert lineage["tasks"] == {"uri": tasks, "table": "train"}  # read by contract: the first task.v1 table
    assert lineage["night0"] == {"uri": night, "table": "trajectories"}

    # a wrong artifact, a missing input: one line saying what to give
    wrong = runner.invoke(app, [STAGE_GROUP, "nightly.new_tasks", "--tasks", tasks, "--previous", tasks])
    said = " ".join(wrong.output.split())
    assert wrong.exit_code == 2 and "is a task artifact" in said
    assert "not one with a 'trajectories' table" in said
    assert "`coa collect`" in said and "Traceback" not in wrong.output
    missing = runner.invoke(app, [STAGE_GROUP, "convert", "--tasks", tasks])
    said = " ".join(missing.output.split())
    assert missing.exit_code == 2
    assert "coa stage convert needs --curated: an artifact whose trajectory.v1 table it reads" in said
