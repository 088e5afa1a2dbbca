"""SFT on several ranks, proven on CPU processes: two gloo ranks under ``torchrun`` (DDP) and under
``accelerate launch`` with the shipped FSDP2 config (sharded by the recipe: coa.kit.fsdp) and,
where deepspeed is installed, the shipped ZeRO-3 config (DeepSpeed's CPU accelerator) train like one
process at the same global batch, stop together when a time budget ends, and a rank killed
mid-run fails the run in one line while the rerun resumes to the plan.

The ranks are checked to be real (``../shared/reference/multi-rank-on-cpu.md``: an accelerate
``MULTI_CPU`` launch started one process whose losses matched a one-process run's to the digit):
each rank logs its rank, the world size and its pid, and the tokens seen per step follow the global
batch. Every launch runs under a timeout that fails the test. Run:
``python -m pytest -q tests/train/test_multi_rank.py``.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coa.kit import ranks
from coa.kit.launch import LOG_FILE, launch_accelerate, launch_torchrun, rank_failure
from coa.train.config import SFT, SFTError, SFTRunConfig
from coa.train.sft import run_sft
from tests.zero3 import sharded_configs

from .budget_rank import replan_on_rank

LAUNCH_TIMEOUT_S = 240.0
"""A launch still running after this fails the test (a hang: ranks out of step wait forever)."""
LOSS_TOLERANCE = 1e-4
"""Largest difference allowed between a 2-rank and a 1-process loss (float32 reductions in another
order: the all-reduce sums two halves where one process sums the whole)."""
RANK_LINE = re.compile(r"rank (\d) of (\d) \(pid (\d+), (\w+)\): (.*)")
SHARD_LINE = re.compile(
    r"rank (\d) (fsdp2|zero3) shards \(.*?\): (\d+) of (\d+) parameter elements .*?; (\d+) sharded"
)
WEIGHT_TOLERANCE = 1e-5
"""Largest difference allowed between a weight trained on 2 ranks and on one process (12 AdamW steps of
float32 gradients reduced in another order)."""


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each rank on one thread (two ranks on two cores), the one-process run too: compare losses and
    batches between rank counts, not speed."""
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _config(tiny_model: Path, **kw: Any) -> SFTRunConfig:
    values: dict[str, Any] = {
        "base_model": str(tiny_model),
        "max_steps": 8,
        "learning_rate": 3e-3,
        "batch_size": 4,
        "grad_accumulation": 2,
        "max_length": 256,
        "logging_steps": 1,
        "save_steps": 4,
        "heldout_fraction": 0.0,
        "seed": 3,
    }
    return SFTRunConfig(**(values | kw))


def _rank_lines(out: Path) -> dict[int, tuple[int, int, str, str]]:
    """``{rank: (world size, pid, distributed type, batch)}`` from the run's log (the last launch's)."""
    found: dict[int, tuple[int, int, str, str]] = {}
    for line in (out / LOG_FILE).read_text().splitlines():
        if m := RANK_LINE.search(line):
            found[int(m[1])] = (int(m[2]), int(m[3]), m[4], m[5])
    return found


def _kill_rank_after_checkpoint(out: Path, rank: int, step: int, done: threading.Event) -> list[int]:
    """SIGKILL ``rank`` of the run in ``out`` once its checkpoint ``step`` is complete; the pid killed."""
    state = out / "checkpoints" / f"checkpoint-{step}" / "trainer_state.json"
    killed: list[int] = []
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while not done.is_set() and time.monotonic() < deadline:
        if state.is_file() and (out / LOG_FILE).is_file():
            pid = _rank_lines(out).get(rank, (0, 0, "", ""))[1]
            if pid:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return killed
        time.sleep(0.01)
    return killed


@pytest.fixture(scope="module")
def one_process(
    tiny_model: Path, sft_rows: pa.Table, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, float]:
    """The 12-step run in this process (one thread, as each rank has), which the 2-rank runs must match;
    its result and wall time."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        t0 = time.perf_counter()
        one = run_sft(sft_rows, _config(tiny_model, max_steps=12), tmp_path_factory.mktemp("one") / "one")
        return one, time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)


def test_two_ranks_train_like_one_process_and_a_killed_rank_resumes(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path, one_process: tuple[Any, float]
) -> None:
    """1 process vs 2 gloo ranks at the same global batch (4 x 2 accumulated = 8): the same examples
    per step, the same loss curve within LOSS_TOLERANCE. The 2-rank run loses rank 1 to SIGKILL after
    its checkpoint at step 4: the launcher says so in one line, and the rerun resumes there and ends
    at the planned step 12 with the same curve."""
    config = _config(tiny_model, max_steps=12)
    one, one_s = one_process

    out = tmp_path / "two"
    done = threading.Event()
    killed: list[int] = []
    killer = threading.Thread(target=lambda: killed.extend(_kill_rank_after_checkpoint(out, 1, 4, done)))
    killer.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(SFTError) as failed:
            launch_torchrun(SFT, sft_rows, config, out, 2, timeout_s=LAUNCH_TIMEOUT_S)
    finally:
        done.set()
        killer.join()
    killed_s = time.perf_counter() - t0
    assert killed, "rank 1 was never killed: the run ended before its checkpoint at step 4"
    message = str(failed.value)
    assert "\n" not in message and "still running" not in message
    assert re.search(r"rank 1 failed first with exit code -9 \(Signal 9 \(SIGKILL\)", message), message
    assert "rerun the stage to resume from the last checkpoint" in message

    t0 = time.perf_counter()
    two = launch_torchrun(SFT, sft_rows, config, out, 2, timeout_s=LAUNCH_TIMEOUT_S)
    resumed_s = time.perf_counter() - t0
    lines = _rank_lines(out)
    assert sorted(lines) == [0, 1] and {(w, kind) for w, _, kind, _ in lines.values()} == {(2, "MULTI_CPU")}
    assert len({pid for _, pid, _, _ in lines.values()} | set(killed)) == 3  # two live ranks, one dead one
    assert lines[0][3] == "2 rank(s) x 4 per micro-batch x 1 accumulated = 8 per optimizer step"
    assert two["start_step"] in (4, 8) and two["global_step"] == two["steps_planned"] == 12
    assert two["steps_run"] == 12 - two["start_step"]
    # the same examples per step: the tokens seen (both ranks' sum, resumed ones too) equal one process's
    assert two["tokens_seen"] == one.tokens_seen
    steps = [s for s, _ in one.loss_curve]
    assert [s for s, _ in two["loss_curve"]] == steps
    gaps = [abs(a - b) for (_, a), (_, b) in zip(one.loss_curve, two["loss_curve"], strict=True)]
    assert max(gaps) < LOSS_TOLERANCE, list(zip(one.loss_curve, two["loss_curve"], strict=True))
    print(f"\n1 process: {one_s:.1f} s, losses {[round(v, 5) for _, v in one.loss_curve]}")
    print(f"2 ranks: killed run {killed_s:.1f} s, resumed run {resumed_s:.1f} s "
          f"(from step {two['start_step']}), losses {[round(v, 5) for _, v in two['loss_curve']]}, "
          f"largest gap {max(gaps):.2e}")  # fmt: skip


@sharded_configs
def test_sharded_on_two_cpu_ranks_trains_like_one_process(
    accelerate_config: str,
    label: str,
    tiny_model: Path,
    sft_rows: pa.Table,
    tmp_path: Path,
    one_process: tuple[Any, float],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shipped sharded config under ``accelerate launch`` on 2 CPU ranks: fsdp2.yaml (accelerate runs
    DDP on CPU, so the recipe applies FSDP2: coa.kit.fsdp) and multi_gpu_zero3.yaml (DeepSpeed's CPU
    accelerator over gloo, where deepspeed installs). Each rank holds half the parameter elements (its
    shards); the loss curve is one process's at the same global batch within LOSS_TOLERANCE; the saved
    model (gathered) loads as a plain HF model and equals the one-process model within WEIGHT_TOLERANCE."""
    from transformers import AutoModelForCausalLM

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # multi_gpu_zero3.yaml names its DeepSpeed JSON from the repository root
    config = _config(tiny_model, max_steps=12)
    one, one_s = one_process
    out = tmp_path / label
    shipped = root / "infra" / "accelerate" / accelerate_config
    t0 = time.perf_counter()
    two = launch_accelerate(SFT, sft_rows, config, out, str(shipped), 2, timeout_s=LAUNCH_TIMEOUT_S)
    two_s = time.perf_counter() - t0
    lines = _rank_lines(out)
    assert sorted(lines) == [0, 1] and len({pid for _, pid, _, _ in lines.values()}) == 2
    assert lines[0][3] == "2 rank(s) x 4 per micro-batch x 1 accumulated = 8 per optimizer step"
    assert {kind for _, _, kind, _ in lines.values()} == {"MULTI_CPU" if label == "fsdp2" else "DEEPSPEED"}
    text = (out / LOG_FILE).read_text()
    shards = {int(r): (int(h), int(t), int(d)) for r, w, h, t, d in SHARD_LINE.findall(text) if w == label}
    assert sorted(shards) == [0, 1], text[-3000:]
    total = shards[0][1]
    assert shards[0][0] + shards[1][0] <= total + 2  # sharded, not copied (ZeRO-3 pads to equal parts)
    assert all(abs(held - total / 2) < 0.01 * total and n > 0 for held, _, n in shards.values())
    assert two["global_step"] == two["steps_run"] == 12 and two["tokens_seen"] == one.tokens_seen
    gaps = [abs(a - b) for (_, a), (_, b) in zip(one.loss_curve, two["loss_curve"], strict=True)]
    assert max(gaps) < LOSS_TOLERANCE, list(zip(one.loss_curve, two["loss_curve"], strict=True))
    loaded = AutoModelForCausalLM.from_pretrained(out / "model").state_dict()
    reference = AutoModelForCausalLM.from_pretrained(one.model_dir).state_dict()
    assert sorted(loaded) == sorted(reference)
    weight_gap = max(float((loaded[k] - reference[k]).abs().max()) for k in reference)
    assert weight_gap < WEIGHT_TOLERANCE
    print(f"\n1 process: {one_s:.1f} s; {label} on 2 ranks: {two_s:.1f} s, losses "
          f"{[round(v, 6) for _, v in two['loss_curve']]}, largest loss gap {max(gaps):.2e}, "
          f"largest weight gap {weight_gap:.2e}")  # fmt: skip


def test_an_fsdp2_run_on_cpu_ranks_refuses_what_it_cannot_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_model: Path, sft_rows: pa.Table
) -> None:
    """Resume (its checkpoints hold no optimizer state: each rank's is a shard), LoRA and SFT's time
    budget are refused with what to do instead, before a model is built; DDP (FSDP_VERSION 1) resumes."""
    from coa.kit import fsdp
    from coa.train.sft_trainer import build_trainer

    checkpoint = tmp_path / "checkpoints" / "checkpoint-8"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    with pytest.raises(SFTError, match=r"cannot resume checkpoint-8 of an FSDP2 run on CPU ranks: .* delete "
                       r".*checkpoints to train from the start, or run sft under DDP"):  # fmt: skip
        fsdp.check_no_resume(checkpoint, "sft", SFTError)
    fsdp.check_no_resume(None, "sft", SFTError)  # a fresh start
    with pytest.raises(SFTError, match=r"sft.lora under FSDP2 on CPU ranks is not supported .* under DDP"):
        build_trainer(sft_rows, _config(tiny_model, lora={"r": 4}), tmp_path / "lora")
    with pytest.raises(SFTError, match=r"sft.time_budget_s under FSDP2 on CPU ranks: .* give sft.max_steps"):
        build_trainer(sft_rows, _config(tiny_model, max_steps=None, time_budget_s=5.0), tmp_path / "budget")
    monkeypatch.setenv("FSDP_VERSION", "1")
    fsdp.check_no_resume(checkpoint, "sft", SFTError)


def test_time_budget_ends_every_rank_at_the_same_step(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    """A 2-rank run whose budget (1.5 s) ends long before max_steps (200): the calibration runs on both
    ranks and rank 0's step time plans for both, so both ranks stop at the plan's step and the run
    passes the steps-run guard (a rank that stopped alone would leave the other in a collective until
    the timeout)."""
    config = _config(tiny_model, max_steps=200, time_budget_s=1.5, calibration_steps=3, grad_accumulation=1)
    out = tmp_path / "budget"
    result = launch_torchrun(SFT, sft_rows, config, out, 2, timeout_s=LAUNCH_TIMEOUT_S)
    assert result["global_step"] == result["steps_planned"] == result["steps_run"] < 200
    stops = re.findall(r"rank (\d): the time budget ends the run at step (\d+)", (out / LOG_FILE).read_text())
    assert sorted(stops) == [("0", str(result["global_step"])), ("1", str(result["global_step"]))]
    plans = re.findall(r"s/step: planning (\d+) steps", (out / LOG_FILE).read_text())
    assert len(plans) == 2 and len(set(plans)) == 1  # each rank planned, both the same


def test_replans_follow_rank_0s_clock(tmp_path: Path) -> None:
    """The re-plans while training, on two real gloo ranks with their own clocks: rank 0 takes 0.5 s a
    step (10 s: 20 steps), rank 1 0.05 s (it alone would run all 100); both stop at rank 0's step."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("forkserver")  # one fresh process imports the rank's module, the ranks fork from it
    ctx.set_forkserver_preload(["tests.train.budget_rank"])
    queue = ctx.Queue()
    store = str(tmp_path / "store")
    procs = [
        ctx.Process(target=replan_on_rank, args=(r, 2, store, step_s, queue))
        for r, step_s in ((0, 0.5), (1, 0.05))
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    ends = sorted(queue.get(timeout=5) for p in procs if p.exitcode is not None)
    assert all(p.exitcode == 0 for p in procs), f"a rank failed or hung: {[p.exitcode for p in procs]} {ends}"
    assert ends == [(0, 20, 20), (1, 20, 20)]


def test_split_batch_keeps_the_global_batch() -> None:
    assert ranks.split_batch(4, 2, 1) == ranks.RankBatch(4, 2, 1)
    assert ranks.split_batch(4, 2, 2) == ranks.RankBatch(4, 1, 2)  # accumulation first: same memory
    assert ranks.split_batch(8, 1, 4) == ranks.RankBatch(2, 1, 4)
    assert ranks.split_batch(3, 2, 6) == ranks.RankBatch(1, 1, 6)
    for n in (1, 2, 3, 4, 6, 8):
        for b, a in ((8, 3), (6, 4), (24, 1)):
            if (b * a) % n == 0:
                assert ranks.split_batch(b, a, n).global_batch == b * a
    with pytest.raises(ValueError, match=r"sft.batch_size x sft.grad_accumulation = 3 x 1 = 3 cannot be "
                       r"shared by 2 ranks: .*sft.grad_accumulation=2"):  # fmt: skip
        ranks.split_batch(3, 1, 2)


def test_rank_failure_reads_torchruns_report() -> None:
    report = """[rank0]: something
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
coa.train.sft FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_00:50:00
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================"""
    assert rank_failure(report) == (
        "rank 1 failed first with exit code -9 (Signal 9 (SIGKILL) received by PID 4242)"
    )
    assert rank_failure("Traceback ...\nValueError: x") is None


@pytest.mark.cuda
@pytest.mark.parametrize("accelerate_config", ["ddp.yaml", "fsdp2.yaml"])
def test_several_gpus_under_the_shipped_configs(
    accelerate_config: str, tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    """On a machine with 2+ GPUs: the shipped DDP and FSDP2 configs run one rank per GPU (accelerate's
    distributed type as named: FSDP takes only on GPUs) and the final model loads unsharded."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2+ CUDA GPUs")
    from transformers import AutoModelForCausalLM

    n = 2
    out = tmp_path / accelerate_config
    config = _config(tiny_model, batch_size=4, grad_accumulation=n)
    shipped = Path(__file__).resolve().parents[2] / "infra" / "accelerate" / accelerate_config
    result = launch_accelerate(SFT, sft_rows, config, out, str(shipped), n, timeout_s=LAUNCH_TIMEOUT_S)
    assert result["global_step"] == result["steps_run"] == 8 and result["device"].startswith("cuda")
    kinds = {kind for _, _, kind, _ in _rank_lines(out).values()}
    assert kinds == {"MULTI_GPU" if accelerate_config == "ddp.yaml" else "FSDP"}
    assert len(_rank_lines(out)) == n
    AutoModelForCausalLM.from_pretrained(out / "model")


def test_both_recipes_launch_as_their_stage_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """launcher torchrun or accelerate, num_processes passed on; a one-process accelerate config with
    several processes refused before anything starts (accelerate would start one process)."""
    from coa.kit import launch as kit_launch
    from coa.rl.config import RL, RLStageConfig
    from coa.train.config import SFTStageConfig

    seen: list[tuple[list[str], str]] = []

    def launched(
        r: Any, rows: Any, c: Any, out: Path, prefix: list[str], how: str, t: Any, *rest: Any, **kw: Any
    ) -> dict[str, Any]:
        seen.append((prefix, how))
        return {}

    monkeypatch.setattr(kit_launch, "_launch", launched)
    accelerate = Path(__file__).resolve().parents[2] / "infra" / "accelerate"
    for recipe, stage in ((SFT, SFTStageConfig), (RL, RLStageConfig)):
        kit_launch.launch(
            recipe, None, None, tmp_path, stage(max_steps=1, launcher="torchrun", num_processes=2)
        )
        assert seen[-1][1] == "torchrun" and seen[-1][0][-3:] == ["--standalone", "--nproc_per_node", "2"]
        ddp = stage(
            max_steps=1,
            launcher="accelerate",
            accelerate_config=str(accelerate / "ddp.yaml"),
            num_processes=4,
        )
        kit_launch.launch(recipe, None, None, tmp_path, ddp)
        assert seen[-1][1] == "accelerate launch" and seen[-1][0][-2:] == ["--num_processes", "4"]
        one = ddp.model_copy(update={"accelerate_config": str(accelerate / "single_gpu.yaml")})
        with pytest.raises(recipe.error, match=rf"runs one process .* {recipe.name}.num_processes is 4: set "
                           rf"{recipe.name}.accelerate_config to infra/accelerate/ddp.yaml"):  # fmt: skip
            kit_launch.launch(recipe, None, None, tmp_path, one)
    assert len(seen) == 4


def test_time_budget_under_deepspeed_on_several_ranks_is_refused(
    monkeypatch: pytest.MonkeyPatch, tiny_model: Path
) -> None:
    """The calibration copies the model: under ZeRO-3 it is partitioned, so the budget is refused there
    with the key to set instead (DDP ranks calibrate: test_time_budget_ends_every_rank_at_the_same_step)."""
    from types import SimpleNamespace

    from coa.train.sft_plan import calibrate_step_time

    monkeypatch.setenv("WORLD_SIZE", "2")
    config = _config(tiny_model, max_steps=None, time_budget_s=10.0)
    with pytest.raises(SFTError, match=r"under DeepSpeed on several ranks: .* give sft.max_steps"):
        calibrate_step_time(SimpleNamespace(is_deepspeed_enabled=True), config)
