"""RL on real ranks (``torchrun --nproc_per_node 2``, gloo on CPU; ``accelerate launch`` with the
shipped FSDP2 and, where deepspeed installs, ZeRO-3 configs) and exact resume, on the tiny model with
HF generate (the ``hf`` backend): a 2-rank run finishes its plan with every group whole on one rank
(sharded runs too: generation on whole weights, no collective per decoding step), and a run
SIGKILLed after a checkpoint and resumed writes the same rollouts and final weights as one never
killed, on 1 rank and on 2 (there only rank 1 is killed: the run fails, rank 0 is not left hanging
in a collective).

The plan crosses an epoch at the kill (4 training prompts, 2 per step: an epoch is 2 steps; the run
is killed after checkpoint 2 and resumes into epoch 1), where the resume used to redraw epoch 0's
prompt order. Each launch runs under a timeout that fails the test (a hung rank), its process group
killed. ``python -m pytest -q tests/rl/test_ranks.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM
from trl.trainer.utils import RepeatSampler

from coa.config import load_config
from coa.kit.run import CHECKPOINTS_DIR
from coa.rl.config import RLError, RLResult, RLRunConfig
from coa.rl.grpo import run_rl
from coa.rl.ranks import rank_batch
from coa.rl.resume import SAMPLING_STATE_FILE, EpochOrderSampler, check_sampling_state
from coa.rl.rollouts import TRUNCATED
from tests.zero3 import sharded_configs

from .helpers import prompts_table

SLOW = pytest.mark.slow  # trainer subprocesses (torch and TRL imported by each)
ROOT = Path(__file__).resolve().parents[2]
LAUNCH_TIMEOUT_S = 150
STEPS, KILL_AFTER, PROMPTS_PER_STEP, GROUP = 3, 2, 2, 4


def launch(args: list[str], ranks: int, log: Path, accelerate_config: str | None = None) -> str:
    """Run ``tests.rl.ranks_main`` on ``ranks`` processes (torchrun for 2, or ``accelerate launch`` with
    ``accelerate_config``); its output. A launch past the timeout fails the test (its whole process
    group is killed first)."""
    runner = (
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks)]
        if ranks > 1
        else [sys.executable]
    )
    if accelerate_config is not None:
        runner = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config]
        runner += ["--num_processes", str(ranks)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1" if ranks > 1 else "2"}
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [*runner, "-m", "tests.rl.ranks_main", *args],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=LAUNCH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for pid in re.findall(r"^rank \d+ of \d+ pid (\d+)$", log.read_text(), re.MULTILINE):
                with contextlib.suppress(ProcessLookupError):  # a rank in a session of its own
                    os.kill(int(pid), signal.SIGKILL)
            pytest.fail(f"{ranks}-rank RL run hung past {LAUNCH_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")
    return log.read_text()


@pytest.fixture(scope="module")
def resolved(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's config: 5 prompts, one task held out and scored every 3 steps, 4 to train on."""
    folder = tmp_path_factory.mktemp("ranks")
    pq.write_table(prompts_table(5), folder / "prompts.parquet")
    config = {
        "base_model": str(tiny_model),
        "prompts": str(folder / "prompts.parquet"),
        "max_steps": STEPS,
        "prompts_per_step": PROMPTS_PER_STEP,
        "group_size": GROUP,
        "steps_per_generation": 1,
        "save_steps": 1,
        "learning_rate": 1e-2,
        "entropy_floor": None,
        "max_total_tokens": 40,
        "max_turns": 2,
        "heldout_eval_steps": STEPS,
        "heldout_fraction": 0.2,
        "tools": {"enabled": [], "record": "off"},
        "seed": 3,
    }
    path = folder / "resolved.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run(resolved: Path, out: Path, ranks: int, *extra: str) -> str:
    text = launch(
        ["--config", str(resolved), "--output-dir", str(out), *extra], ranks, out.with_suffix(".log")
    )
    return text


def finished(text: str, ranks: int) -> None:
    """Every rank started (its own pid) and reached the plan's last step."""
    started = {
        line.split()[1]: line.split()[-1]
        for line in text.splitlines()
        if line.startswith("rank ") and " of " in line
    }
    assert sorted(started) == [str(r) for r in range(ranks)], text[-3000:]
    assert len(set(started.values())) == ranks  # real processes, not one claiming to be two
    assert all(
        f" of {ranks} pid " in line
        for line in text.splitlines()
        if line.startswith("rank ") and " of " in line
    )
    done = [line for line in text.splitlines() if " done: global step " in line]
    assert len(done) == ranks and all(f"global step {STEPS}," in line for line in done), text[-3000:]
    agreed = {line.split(", agreed ")[1] for line in done}
    assert len(agreed) == 1  # one held-out curve, alarm and logged metrics on every rank


def rollouts(out: Path) -> pa.Table:
    return pq.read_table(out / "rollouts.parquet").sort_by(
        [("step", "ascending"), ("prompt_id", "ascending"), ("sample", "ascending")]
    )


def weights(out: Path) -> dict[str, torch.Tensor]:
    return dict(AutoModelForCausalLM.from_pretrained(out / "model").state_dict())


def assert_same_run(killed: Path, uninterrupted: Path) -> None:
    a, b = rollouts(killed), rollouts(uninterrupted)
    assert a.num_rows == b.num_rows
    differ = [
        (x["step"], x["prompt_id"], x["sample"])
        for x, y in zip(a.to_pylist(), b.to_pylist(), strict=True)
        if x != y
    ]
    assert differ == []
    wa, wb = weights(killed), weights(uninterrupted)
    assert all(torch.equal(wa[k], wb[k]) for k in wb)


@pytest.fixture(scope="module")
def two_ranks(resolved: Path) -> tuple[Path, str]:
    out = resolved.parent / "two"
    return out, run(resolved, out, 2)


@SLOW
def test_two_ranks_finish_the_plan_with_whole_groups(two_ranks: tuple[Path, str]) -> None:
    out, text = two_ranks
    finished(text, 2)
    table = rollouts(out)
    kept = table.filter(table.column("kept"))
    # the plan's batch whatever the rank count: prompts_per_step groups a step, one per rank
    assert kept.num_rows == STEPS * PROMPTS_PER_STEP * GROUP
    groups: dict[Any, list[int]] = {}
    for row in table.to_pylist():
        groups.setdefault((row["step"], row["prompt_id"]), []).append(row["sample"])
    # each group generated once, whole (no prompt on two ranks of one batch, refills included)
    assert all(sorted(samples) == list(range(GROUP)) for samples in groups.values())
    assert (out / CHECKPOINTS_DIR / f"checkpoint-{STEPS}" / "rng_state_1.pth").is_file()
    assert_stats_of_every_rank(out, table)


def assert_stats_of_every_rank(out: Path, table: pa.Table) -> None:
    """The result's rollout stats and each step's logged batch metrics are those of the rows written
    (every rank's): counts added up over the ranks, not rank 0's nor a mean of the ranks' means."""
    result = json.loads((out / "rl_result.json").read_text())
    rows = table.to_pylist()
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["step"], row["prompt_id"]), []).append(row)
    kept = [g for g in groups.values() if g[0]["kept"]]
    stats = result["rollout_stats"]
    assert stats["groups_trained"] == len(kept) == STEPS * PROMPTS_PER_STEP  # both ranks' groups
    assert stats["groups_generated"] == len(groups) and stats["episodes"] == len(rows)
    assert stats["truncated_share"] == round(sum(r["finish"] in TRUNCATED for r in rows) / len(rows), 4)
    for point in result["curves"]:
        step = int(point["step"]) - 1  # a step's log follows the batch generated at its start
        at = [r for r in rows if r["step"] == step]
        equal = [
            g
            for (s, _), g in groups.items()
            if s == step and g[0]["kept"] and len({r["reward"] for r in g}) == 1
        ]
        assert point["dynamic/shortfall_groups"] == len(equal)
        assert point["rollout/truncated_share"] == pytest.approx(
            sum(r["finish"] in TRUNCATED for r in at) / len(at)
        )


BUDGET_STEPS, BUDGET_S = 40, 3.0  # 40 steps take 10-20 s here: the budget ends the run
REFILL = re.compile(
    r"^rank (\d) step (\d+) refill round (\d+): (starts|none) \(.*this rank's clock says (\w+)\)$"
)


@SLOW
def test_rank_0s_clock_decides_every_ranks_refill_rounds(resolved: Path) -> None:
    """2 ranks whose time budget ends the run before its ``max_steps``, rank 1's own clock saying the
    refill deadline passed at once: every refill round is decided from rank 0's clock, so both ranks
    log the same decisions (rounds start that rank 1 alone would have refused) and stop at one step."""
    config = yaml.safe_load(resolved.read_text()) | {
        "max_steps": BUDGET_STEPS,
        "time_budget_s": BUDGET_S,
        "heldout_eval_steps": None,
        "save_steps": BUDGET_STEPS,
    }
    path = resolved.parent / "budget.yaml"
    path.write_text(yaml.safe_dump(config))
    out = resolved.parent / "budget"
    text = run(path, out, 2, "--clock-deadline", "1:0")
    done = [line for line in text.splitlines() if " done: global step " in line]
    assert len(done) == 2, text[-3000:]
    result = json.loads((out / "rl_result.json").read_text())
    assert result["global_step"] == result["steps_planned"] == result["steps_run"] < BUDGET_STEPS
    assert all(f"global step {result['global_step']}," in line for line in done)  # one stop for both
    decisions: dict[str, list[tuple[str, ...]]] = {"0": [], "1": []}
    for line in text.splitlines():
        if m := REFILL.match(line):
            decisions[m[1]].append((m[2], m[3], m[4]))
            assert m[1] == "0" or m[5] == "passed"  # rank 1's own clock refused every round
    assert decisions["0"] == decisions["1"], text[-3000:]
    assert "starts" in {d[2] for d in decisions["1"]}, decisions  # rounds rank 1 alone would not start
    steps = {int(d[0]) for d in decisions["0"]}
    assert steps <= set(range(result["global_step"]))


@SLOW
@sharded_configs
def test_two_sharded_ranks_generate_on_whole_weights_and_finish_the_plan(
    accelerate_config: str, label: str, resolved: Path, tiny_model: Path
) -> None:
    """The shipped fsdp2.yaml (the recipe shards on CPU: coa.kit.fsdp) and, where deepspeed
    installs, multi_gpu_zero3.yaml on 2 CPU ranks with the in-process ``hf`` backend: each rank holds
    half the model; generation runs on whole weights (FSDP2's groups unsharded once per batch, ZeRO-3's
    gathered by TRL) with no collective per decoding step, so ranks whose episodes decode different
    numbers of tokens do not wait on each other; the run finishes its plan within the launch timeout,
    writes every rank's whole groups, and saves the gathered model, which loads as a plain HF model
    and differs from the base (it trained)."""
    out = resolved.parent / label
    shipped = str(ROOT / "infra" / "accelerate" / accelerate_config)
    t0 = time.perf_counter()
    text = launch(["--config", str(resolved), "--output-dir", str(out)], 2, out.with_suffix(".log"), shipped)
    took = time.perf_counter() - t0
    finished(text, 2)
    shards = re.findall(rf"rank (\d) {label} shards \(.*?\): (\d+) of (\d+) parameter elements", text)
    assert sorted(r for r, _, _ in shards) == ["0", "1"], text[-3000:]
    total = int(shards[0][2])
    assert all(abs(int(h) - total / 2) < 0.01 * total for _, h, _ in shards)  # each rank: half
    table = rollouts(out)
    assert table.filter(table.column("kept")).num_rows == STEPS * PROMPTS_PER_STEP * GROUP
    longest: dict[tuple[int, str], int] = {}  # a group's decode steps: its longest episode's tokens
    for row in table.to_pylist():
        key = (row["step"], row["prompt_id"])
        longest[key] = max(longest.get(key, 0), row["tokens"])
    assert len(set(longest.values())) > 1, longest  # groups of unequal length: ranks decoded unequally
    trained, base = weights(out), dict(AutoModelForCausalLM.from_pretrained(tiny_model).state_dict())
    assert sorted(trained) == sorted(base) and any(not torch.equal(trained[k], base[k]) for k in base)
    print(f"\n{label} RL on 2 ranks: {STEPS} steps in {took:.1f} s")


def in_process(resolved: Path, out: Path, resume: bool = False) -> RLResult:
    """The same run in this process (one rank): no launch to pay for where none is needed."""
    config = load_config(resolved, [], model=RLRunConfig)
    return run_rl(pq.read_table(config.prompts), config, out, resume=resume)


def killed_after_checkpoint(resolved: Path, out: Path, ranks: int, *extra: str) -> str:
    text = run(resolved, out, ranks, "--kill-after", str(KILL_AFTER), *extra)
    assert f"after checkpoint {KILL_AFTER}" in text and " done: " not in text
    assert (out / CHECKPOINTS_DIR / f"checkpoint-{KILL_AFTER}" / SAMPLING_STATE_FILE).is_file()
    assert not (out / CHECKPOINTS_DIR / f"checkpoint-{KILL_AFTER + 1}").exists()
    return text


@SLOW
def test_a_killed_run_resumes_to_the_same_rollouts_and_weights_on_one_rank(resolved: Path) -> None:
    uninterrupted, out = resolved.parent / "one", resolved.parent / "killed-1"
    assert in_process(resolved, uninterrupted).global_step == STEPS
    killed_after_checkpoint(resolved, out, 1)  # a real SIGKILL: a process of its own
    result = in_process(resolved, out, resume=True)
    assert (result.start_step, result.steps_run) == (KILL_AFTER, STEPS - KILL_AFTER)
    assert_same_run(out, uninterrupted)


@SLOW
def test_a_killed_run_resumes_to_the_same_rollouts_and_weights_on_two_ranks(
    resolved: Path, two_ranks: tuple[Path, str]
) -> None:
    out = resolved.parent / "killed-2"
    # one rank lost (rank 1 SIGKILLed): the run fails within the launch timeout, rank 0 not left hung
    text = killed_after_checkpoint(resolved, out, 2, "--kill-rank", "1")
    assert "killing rank 1 " in text and "killing rank 0 " not in text and "FAILED" in text
    finished(run(resolved, out, 2, "--resume"), 2)
    assert_same_run(out, two_ranks[0])


@pytest.mark.parametrize(("ranks", "episodes"), [(1, 8), (2, 4), (4, 2)])
def test_the_ranks_share_the_plans_batch_in_whole_groups(ranks: int, episodes: int) -> None:
    config = RLRunConfig(
        base_model="m", max_steps=2, prompts_per_step=4, group_size=2, steps_per_generation=1
    )
    assert rank_batch(config, ranks) == episodes  # ranks x per-rank batch = 4 groups of 2, whatever N
    with pytest.raises(
        RLError, match=r"prompts_per_step \(4\) must be a multiple of the number of ranks \(3\)"
    ):
        rank_batch(config, 3)


def test_an_epochs_prompt_order_does_not_depend_on_the_epochs_before_it() -> None:
    def order(epochs: list[int]) -> list[int]:
        sampler = EpochOrderSampler(list(range(12)), mini_repeat_count=2, batch_size=3, seed=5)
        for epoch in epochs:
            sampler.set_epoch(epoch)
            drawn = list(sampler)
        return drawn

    resumed, uninterrupted = order([2]), order([0, 1, 2])
    assert resumed == uninterrupted
    assert order([1]) != order([0])  # a new order each epoch
    # epoch 0 is TRL's own order for the seed (runs that never pass an epoch are unchanged)
    assert order([0]) == list(RepeatSampler(list(range(12)), mini_repeat_count=2, batch_size=3, seed=5))


def test_a_resume_on_another_rank_count_warns_that_its_rollouts_will_differ(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    with caplog.at_level(logging.WARNING, logger="coa.rl"):
        check_sampling_state(checkpoint, 1)  # written before sampling state was saved
    assert "has no sampling_state.json" in caplog.text
    (checkpoint / SAMPLING_STATE_FILE).write_text(json.dumps({"world_size": 2, "seed": 0, "epoch": 0}))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="coa.rl"):
        check_sampling_state(checkpoint, 2)
    assert caplog.text == ""
    with caplog.at_level(logging.WARNING, logger="coa.rl"):
        check_sampling_state(checkpoint, 1)
    assert "resuming on 1 rank(s) from checkpoint-2, written by 2" in caplog.text
