"""SIGKILL ``coa evaluate`` and ``coa rl`` (tiny model, CPU) and rerun them.

* evaluate, killed at seeded moments of its build (chained, as in :mod:`tests.faults.test_kill`):
  the rerun commits at the content key an uninterrupted run commits, with the same scores table
  (every episode's prediction, correctness, score and text: one sample per task is greedy decoding,
  deterministic; more samples draw at a temperature, unseeded, by design);
* RL, killed right after a checkpoint (at a seeded moment within 0.2 s of it): the rerun resumes
  from that checkpoint, runs the rest of the planned steps and commits at the key the killed run
  was building.
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
)

EVAL_LIMITS = ["--samples", "1", "evaluate.max_turns=2", "evaluate.max_new_tokens=8",
               "evaluate.max_total_tokens=16", "evaluate.prompt_style=brief"]  # fmt: skip
SCORES = ["eval_id", "task_id", "sample_index", "prediction", "correct", "score", "format_valid", "n_turns",
          "completion_tokens", "text"]  # fmt: skip
"""The scores table's columns that must match (latency and the like are wall-clock)."""
RL_STEPS = 8
"""Planned RL steps: a checkpoint every 2, the kill lands within 0.2 s of the first one."""
RL_ARGS = [f"rl.max_steps={RL_STEPS}", "rl.save_steps=2", "rl.logging_steps=1", "rl.families=null",
           "rl.time_budget_s=null", "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_turns=2",
           "rl.max_new_tokens=8", "rl.max_total_tokens=16", "rl.overlong_buffer=8", "rl.entropy_floor=null",
           "rl.launcher=in_process"]  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str, str]]:
    """A store with a synthetic task set and an rl_prompt.v1 artifact, and a tiny model folder."""
    import schemas
    from coa import io
    from coa.model import init_model, sft_corpus
    from tests.rl.helpers import prompts_table
    from tests.train.conftest import TINY
    from tests.train.rows import arith_rows

    base = tmp_path_factory.mktemp("kill-eval-rl")
    root = base / "store"
    model = init_model(sft_corpus(arith_rows(40, seed=0)), TINY, base / "tiny")
    with in_repo():
        code, out, err = cli(root, "tasks", "synthetic", "-c", CONFIG, *TASKS)
    assert code == 0, err[-3000:]
    writer = io.Store(str(root)).writer("converted", "coa", {"faults": "rl"})
    writer.write_table("rl_prompts", prompts_table(8), schemas.RL_PROMPT)
    yield root, model, out.strip().splitlines()[-1], writer.commit().uri


def test_sigkill_evaluate_then_rerun_commits_the_same_scores(inputs: tuple[Path, Path, str, str]) -> None:
    root, model, tasks, _ = inputs
    stage = Stage("evaluate", "eval", ["evaluate", "--model", str(model), "--tasks", tasks, "-c", CONFIG,
                                       *EVAL_LIMITS], "eval: ")  # fmt: skip
    with in_repo():
        run_reference(root, stage)
    reference = move_aside(stage.uri, root.parent / "references" / stage.folder)
    injected, new = kill_at_seeded_moments(root, stage, "sigkill-evaluate")

    def scores(folder: Path) -> list[dict[str, object]]:
        rows = pq.read_table(folder / "eval.parquet", columns=SCORES).to_pylist()
        return sorted(rows, key=lambda r: str(r["eval_id"]))

    checks = {
        "same content key": new == Path(stage.uri),
        "same scores table": scores(reference) == scores(new),
        "folder holds exactly its manifest": exactly_the_manifest(new),
        "no leftovers": not leftovers(root, stage),
    }
    for _ in range(injected):
        record("evaluate", "SIGKILL during the build", all(checks.values()))
    assert injected >= 2, f"only {injected} of {KILLS} kills landed inside the build"
    assert all(checks.values()), checks


def test_sigkill_rl_after_a_checkpoint_resumes_with_the_planned_steps(
    inputs: tuple[Path, Path, str, str],
) -> None:
    """``coa rl`` SIGKILLed right after a checkpoint is written: the rerun resumes from it, runs the
    rest of the planned steps, and commits at the key the killed run was building."""
    from coa import io

    root, model, _, data = inputs
    args = ["rl", "--data", data, "--model", str(model), "-c", CONFIG, *RL_ARGS]
    state = kill_after_first_checkpoint(
        root, args, "checkpoints/model/*/**/checkpoint-*/trainer_state.json", "sigkill-rl", 240
    )
    killed_at = next(p for p in state.parents if p.parent.name == "model").name
    assert not (root / "model" / killed_at / io.MANIFEST).exists(), "the RL run committed before the kill"
    with in_repo():
        code, out, err = cli(root, *args)
    assert code == 0, err[-3000:]
    uri = out.split("model: ", 1)[1].split()[0]
    result = json.loads(io.read_file(uri, "rl_result.json"))
    resumed = (
        result["start_step"] >= 2
        and result["start_step"] + result["steps_run"] == result["steps_planned"] == RL_STEPS
    )
    held = Path(uri).name == killed_at and resumed and exactly_the_manifest(Path(uri))
    record("rl", "SIGKILL after a checkpoint", held)
    assert held, (killed_at, uri, {k: result[k] for k in ("start_step", "steps_run", "steps_planned")})
