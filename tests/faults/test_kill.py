"""SIGKILL each stage's process at seeded moments of its build, then rerun: the rerun commits the
artifact an uninterrupted run commits (same content key; byte-identical tables where the stage is
deterministic, the same run ids, statuses and answers for collection), leaves nothing behind, and
no uncommitted folder is ever read.

The kills of a stage are chained (the second kill hits the run that resumes from the first), as a
flaky machine would; then one rerun finishes. SFT (here) and RL (tests/faults/test_kill_eval_rl.py,
with evaluate) are killed right after a checkpoint and resume from it; the dry run that names the
checkpoint is in tests/test_failures.py. S3 writers killed mid-request: tests/faults/test_s3_faults.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.faults.conftest import record
from tests.faults.harness import (
    CONFIG,
    KILLS,
    TASKS,
    Stage,
    cli,
    exactly_the_manifest,
    in_repo,
    kill_after_first_checkpoint,
    kill_at_seeded_moments,
    leftovers,
    move_aside,
    run_reference,
    table_digests,
)

DETERMINISTIC = {"tasks", "curate", "convert"}
"""Stages whose tables are byte-identical from run to run (collection records wall-clock times)."""


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Stage]]]:
    """The reference chain tasks -> collect -> curate -> convert, built uninterrupted in process."""
    root = tmp_path_factory.mktemp("faults") / "store"
    stages: dict[str, Stage] = {}
    with in_repo():
        stages["tasks"] = Stage("tasks", "tasks", ["tasks", "synthetic", "-c", CONFIG, *TASKS], "")
        run_reference(root, stages["tasks"])
        t = stages["tasks"].uri
        stages["collect"] = Stage(
            "collect", "trajectories",
            ["collect", "--tasks", t, "--table", "train", "-c", CONFIG, "collect.concurrency=1"],
            "trajectories: ",
        )  # fmt: skip
        run_reference(root, stages["collect"])
        stages["curate"] = Stage(
            "curate", "curated",
            ["curate", "--raw", stages["collect"].uri, "--tasks", t, "--table", "train", "-c", CONFIG,
             "curate.gate.enabled=false"],
            "curated: ",
        )  # fmt: skip
        run_reference(root, stages["curate"])
        stages["convert"] = Stage(
            "convert", "converted",
            ["convert", "--curated", stages["curate"].uri, "--tasks", t, "--table", "train", "-c", CONFIG],
            "converted: ",
        )  # fmt: skip
        run_reference(root, stages["convert"])
        yield root, stages


def _same_content(stage: Stage, ref: Path, new: Path) -> bool:
    if stage.name in DETERMINISTIC:
        return table_digests(ref) == table_digests(new)
    columns = ["run_id", "task_id", "status", "final_answer", "correct", "n_steps"]
    a = pq.read_table(ref / "trajectories.parquet", columns=columns)
    b = pq.read_table(new / "trajectories.parquet", columns=columns)
    ids = b.column("run_id").to_pylist()
    return a.equals(b) and len(ids) == len(set(ids))


@pytest.mark.parametrize("name", ["tasks", "collect", "curate", "convert"])
def test_sigkill_then_rerun_commits_the_reference(chain: tuple[Path, dict[str, Stage]], name: str) -> None:
    root, stages = chain
    stage = stages[name]
    reference = move_aside(stage.uri, root.parent / "references" / stage.folder)
    injected, new = kill_at_seeded_moments(root, stage, f"sigkill-{name}")
    checks = {
        "same content key": new == Path(stage.uri),
        "same contents": _same_content(stage, reference, new),
        "folder holds exactly its manifest": exactly_the_manifest(new),
        "no leftovers": not leftovers(root, stage),
    }
    for _ in range(injected):
        record(name, "SIGKILL during the build", all(checks.values()))
    move_aside(str(new), root.parent / "rebuilt" / stage.folder)  # downstream references read the original
    move_aside(str(reference), Path(stage.uri))
    assert injected >= 2, f"only {injected} of {KILLS} kills landed inside the build"
    assert all(checks.values()), checks


def test_sigkill_sft_after_a_checkpoint_resumes_with_the_planned_steps(tmp_path: Path) -> None:
    """``coa sft`` SIGKILLed after a checkpoint is written: the rerun resumes from it, runs the rest of
    the planned steps, and commits at the same content key."""
    import schemas
    from coa import io
    from coa.model import init_model, sft_corpus
    from tests.train.conftest import TINY
    from tests.train.rows import arith_rows

    root = tmp_path / "store"
    model = init_model(sft_corpus(arith_rows(40, seed=0)), TINY, tmp_path / "tiny")
    writer = io.Store(str(root)).writer("converted", "coa", {"faults": 1})
    writer.write_table("sft", arith_rows(48, seed=1), schemas.SFT)
    data = writer.commit().uri
    args = ["sft", "--data", data, "--model", str(model), "-c", CONFIG, "sft.max_steps=40",
            "sft.save_steps=2", "sft.batch_size=8", "sft.max_length=256", "sft.logging_steps=1",
            "sft.launcher=in_process"]  # fmt: skip
    state = kill_after_first_checkpoint(
        root, args, "checkpoints/model/*/checkpoints/checkpoint-*/trainer_state.json", "sigkill-sft", 180
    )
    # 40 planned steps: on a fast quiet machine 6 steps ran to the commit inside the 0.2 s window, and
    # the "rerun" then only reused a finished artifact; the kill must land in the middle of training
    assert not list(root.glob("model/*/_COMMITTED")), (
        "the SFT run committed before the kill: not a mid-run fault"
    )
    killed_at = state.parents[2].name  # the address the killed run was building
    with in_repo():
        code, out, err = cli(root, *args)
    assert code == 0, err[-3000:]
    uri = out.split("model: ", 1)[1].split()[0]
    result = json.loads(io.read_file(uri, "sft_result.json"))
    resumed = (
        result["start_step"] >= 2
        and result["start_step"] + result["steps_run"] == result["steps_planned"] == 40
    )
    held = Path(uri).name == killed_at and resumed and exactly_the_manifest(Path(uri))
    record("sft", "SIGKILL after a checkpoint", held)
    assert held, (killed_at, uri, result)
