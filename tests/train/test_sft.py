"""CPU SFT runs of the tiny model: learning, checkpoints and resume, the step guard, the entry point."""

from __future__ import annotations

import json
import math
import os
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
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from coa.config import ConfigError, load_config
from coa.kit import budget as budget_module
from coa.kit.budget import HEADROOM
from coa.kit.run import last_checkpoint
from coa.train import SFTError, SFTRunConfig, StepCountError
from coa.train.data import encode_examples
from coa.train.sft import LOSS_PNG, PLAN_FILE, RESULT_FILE, main, run_sft
from coa.train.sft_plan import CALIBRATION_WARMUP, calibration_order, step_seconds_at

REPO = Path(__file__).resolve().parents[2]


def _config(model: Path, **kw: Any) -> SFTRunConfig:
    base: dict[str, Any] = dict(
        base_model=str(model), max_steps=6, learning_rate=3e-3, warmup_steps=2, batch_size=8, max_length=256,
        logging_steps=1, save_steps=3, adam_beta2=0.98, weight_decay=0.01,
    )  # fmt: skip
    return SFTRunConfig(**{**base, **kw})


def _weights(path: str | Path) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


class StopAt(TrainerCallback):
    """Asks the trainer to stop early, the way a signal handler or a misbehaving callback would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step >= self.step:
            control.should_training_stop = True


class CrashAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"killed at step {self.step}")


def test_fused_and_plain_lm_head_train_the_same_loss(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    """TRL's fused head and the model's own loss agree on the masked loss (the same steps, same curve)."""
    runs = {
        fused: run_sft(sft_rows, _config(tiny_model, max_steps=3, save_steps=100, fused_lm_head=fused),
                       tmp_path / str(fused))
        for fused in (True, False)
    }  # fmt: skip
    for fused, result in runs.items():
        assert [s for s, _ in result.loss_curve] == [1, 2, 3]
        state_file = tmp_path / str(fused) / "checkpoints" / "checkpoint-3" / "trainer_state.json"
        state = json.loads(state_file.read_text())
        logged = [e for e in state["log_history"] if "loss" in e]
        assert logged and all(("mean_token_accuracy" in e) is fused for e in logged)
    for (_, a), (_, b) in zip(runs[True].loss_curve, runs[False].loss_curve, strict=True):
        assert a == pytest.approx(b, rel=1e-4)
    assert runs[True].trained_tokens == runs[False].trained_tokens > 0


def test_head_at_trained_positions_only_is_the_models_own_loss_and_gradients(tiny_model: Path) -> None:
    """The LM head skipped where no label is trained: the same loss and gradients as the full head."""
    from coa.train.sft_trainer import trained_positions_loss

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model.train()
    ids = torch.randint(3, model.config.vocab_size, (3, 12))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # right padding, as the collator pads
    labels = ids.clone()
    labels[:, :4] = -100  # the prompt
    labels[0, 6:8] = -100  # an observation
    labels[mask == 0] = -100
    inputs = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    for items in (None, torch.tensor(50)):  # averaged, or summed over a larger accumulated batch
        model.zero_grad()
        expected = model(**inputs, **({} if items is None else {"num_items_in_batch": items})).loss
        expected.backward()
        reference = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad()
        got = trained_positions_loss(model, inputs, items)
        got.backward()
        assert got.item() == pytest.approx(expected.item(), rel=1e-6)
        for name, param in model.named_parameters():
            assert torch.allclose(param.grad, reference[name], rtol=1e-4, atol=1e-7), name


def test_sft_with_the_head_at_trained_positions_trains_as_with_the_full_head(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coa.train import sft_trainer

    calls: list[str] = []
    real = sft_trainer.trained_positions_loss

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(where)
        return real(*args, **kwargs)

    monkeypatch.setattr(sft_trainer, "trained_positions_loss", spy)
    runs = {}
    for where in ("trained", "all"):
        config = _config(tiny_model, max_steps=3, save_steps=100, fused_lm_head=False, head_positions=where)
        runs[where] = run_sft(sft_rows, config, tmp_path / where)
    assert calls == ["trained"] * 3  # one optimizer step, one batch: one call a step, none with "all"
    for (_, a), (_, b) in zip(runs["trained"].loss_curve, runs["all"].loss_curve, strict=True):
        assert a == pytest.approx(b, rel=1e-4)
    trained, full = _weights(runs["trained"].model_dir), _weights(runs["all"].model_dir)
    assert all(torch.allclose(trained[k], full[k], atol=1e-5) for k in full)
    assert runs["trained"].trained_tokens == runs["all"].trained_tokens > 0


def test_short_run_changes_weights_and_lowers_loss(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    result = run_sft(sft_rows, _config(tiny_model, max_steps=20, save_steps=100), tmp_path)
    assert (result.steps_planned, result.steps_run, result.global_step, result.start_step) == (20, 20, 20, 0)
    assert [s for s, _ in result.loss_curve] == list(range(1, 21))
    first, last = result.loss_curve[0][1], result.loss_curve[-1][1]
    assert last < first - 0.5 and result.final_loss == last
    before, after = _weights(tiny_model), _weights(result.model_dir)
    assert before.keys() == after.keys()
    assert all(not torch.equal(before[k], after[k]) for k in before if "layers.0." in k)
    # The saved model and tokenizer load back as any HF checkpoint.
    assert (
        AutoTokenizer.from_pretrained(result.model_dir)("12")["input_ids"]
        == AutoTokenizer.from_pretrained(tiny_model)("12")["input_ids"]
    )
    assert result.tokens_seen == result.session_tokens > result.trained_tokens > 0
    assert result.tokens_per_s > 0 and result.device == "cpu" and result.bf16 is False
    assert result.device_name is not None and result.device_name.endswith(" threads")  # the CPU it ran on
    assert (tmp_path / LOSS_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / RESULT_FILE).read_text())["steps_run"] == 20
    assert last_checkpoint(tmp_path / "checkpoints") == tmp_path / "checkpoints" / "checkpoint-20"


def test_resumed_run_continues_from_its_checkpoint(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    config = _config(tiny_model)
    with pytest.raises(KeyboardInterrupt):
        run_sft(sft_rows, config, tmp_path / "run", callbacks=[CrashAt(4)])
    assert (
        last_checkpoint(tmp_path / "run" / "checkpoints") == tmp_path / "run" / "checkpoints" / "checkpoint-3"
    )
    assert not (tmp_path / "run" / "model").exists()
    with pytest.raises(SFTError, match="already holds checkpoints"):
        run_sft(sft_rows, config, tmp_path / "run")  # a fresh start would mix two runs
    with pytest.raises(SFTError, match=r"changed training config \(learning_rate"):
        run_sft(sft_rows, config.model_copy(update={"learning_rate": 1e-3}), tmp_path / "run", resume=True)

    resumed = run_sft(sft_rows, config, tmp_path / "run", resume=True)
    assert (resumed.start_step, resumed.steps_run, resumed.global_step) == (3, 3, 6)
    assert [s for s, _ in resumed.loss_curve] == [1, 2, 3, 4, 5, 6]  # history kept, steps continue
    # Same as never having stopped: same data order, schedule, optimizer state, weights.
    straight = run_sft(sft_rows, config, tmp_path / "straight")
    assert [v for _, v in resumed.loss_curve] == pytest.approx([v for _, v in straight.loss_curve])
    a, b = _weights(resumed.model_dir), _weights(straight.model_dir)
    assert all(torch.allclose(a[k], b[k]) for k in a)
    # Resuming a finished run takes no step and reports the same model.
    again = run_sft(sft_rows, config, tmp_path / "run", resume=True)
    assert (again.start_step, again.steps_run, again.global_step) == (6, 0, 6)
    assert again.loss_curve == resumed.loss_curve
    c = _weights(again.model_dir)
    assert all(torch.equal(a[k], c[k]) for k in a)


def test_step_guard_refuses_a_short_run(tiny_model: Path, sft_rows: pa.Table, tmp_path: Path) -> None:
    with pytest.raises(StepCountError, match=r"took 3 optimizer steps in this run but the plan was 6"):
        run_sft(sft_rows, _config(tiny_model), tmp_path, callbacks=[StopAt(3)])
    assert not (tmp_path / "model").exists() and not (tmp_path / RESULT_FILE).exists()


@pytest.mark.serial  # plans from measured step times
def test_time_budget_plans_the_steps(tiny_model: Path, sft_rows: pa.Table, tmp_path: Path) -> None:
    config = _config(tiny_model, max_steps=None, time_budget_s=1.5, calibration_steps=2, save_steps=1000)
    result = run_sft(sft_rows, config, tmp_path)
    plan = json.loads((tmp_path / PLAN_FILE).read_text())
    assert result.calibrated_step_s and result.calibrated_step_s > 0
    assert plan["first_plan"] == int(1.5 // result.calibrated_step_s)
    assert plan["max_steps"] == math.ceil(plan["first_plan"] * HEADROOM)  # room for a faster run
    assert result.steps_planned == result.steps_run == result.global_step <= plan["max_steps"]
    assert result.train_runtime_s < 10 * 1.5  # the estimate is in the right range


def test_max_steps_caps_a_time_budget(tiny_model: Path, sft_rows: pa.Table, tmp_path: Path) -> None:
    # A budget that fits many more steps than the cap: the plan is the cap, and re-plans never pass it.
    config = _config(tiny_model, max_steps=3, time_budget_s=60, calibration_steps=2, save_steps=1000)
    result = run_sft(sft_rows, config, tmp_path)
    plan = json.loads((tmp_path / PLAN_FILE).read_text())
    assert plan["first_plan"] == plan["max_steps"] == 3
    assert result.steps_planned == result.steps_run == result.global_step == 3


class SlowDown(TrainerCallback):
    """Makes every step after ``step`` take ``seconds`` longer, like the demo machine's drifting speed."""

    def __init__(self, step: int, seconds: float) -> None:
        self.step, self.seconds = step, seconds

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step > self.step:
            time.sleep(self.seconds)


@pytest.mark.serial  # plans from measured step times
def test_time_budget_re_plans_a_run_that_slows_down(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget_module, "REPLAN_EVERY", 2)
    config = _config(tiny_model, max_steps=None, time_budget_s=2.0, calibration_steps=2, save_steps=1000)
    result = run_sft(sft_rows, config, tmp_path, callbacks=[SlowDown(2, 0.1)])
    plan = json.loads((tmp_path / PLAN_FILE).read_text())
    # Slower than calibrated from step 3 on: fewer steps than first planned, all of them run and the
    # schedule's decay ends where the run ends.
    assert result.steps_run == result.steps_planned == result.global_step < plan["first_plan"]
    state = json.loads(
        (tmp_path / "checkpoints" / f"checkpoint-{result.global_step}" / "trainer_state.json").read_text()
    )
    assert state["max_steps"] == result.global_step
    last_lr = [e["learning_rate"] for e in state["log_history"] if "learning_rate" in e][-1]
    assert last_lr < 0.5 * config.learning_rate  # built for more steps, the decay still ended on time


@pytest.mark.serial  # plans from measured step times
def test_time_budget_run_resumes_with_the_plan_of_its_checkpoint(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    config = _config(tiny_model, max_steps=None, time_budget_s=1.5, calibration_steps=2, save_steps=2)
    with pytest.raises(KeyboardInterrupt):
        run_sft(sft_rows, config, tmp_path, callbacks=[CrashAt(3)])
    checkpoint = last_checkpoint(tmp_path / "checkpoints")
    assert checkpoint is not None and checkpoint.name == "checkpoint-2"
    in_force = json.loads((checkpoint / "trainer_state.json").read_text())["max_steps"]
    resumed = run_sft(sft_rows, config, tmp_path, resume=True)
    assert (resumed.start_step, resumed.global_step, resumed.steps_planned) == (2, in_force, in_force)
    assert resumed.steps_run == in_force - 2


def test_step_time_includes_the_fixed_cost_per_step() -> None:
    tokens = [400.0, 300.0, 200.0, 100.0]
    seconds = [0.05 + 0.001 * t for t in tokens]
    assert step_seconds_at(tokens, seconds, 250) == pytest.approx(0.3)
    # timing only the longest step and scaling per token says 0.28: the fixed cost gets lost
    assert sum(seconds[:1]) / 400 * 250 == pytest.approx(0.28125)
    assert step_seconds_at([200.0, 200.0], [0.2, 0.4], 100) == pytest.approx(0.15)  # no spread: per token
    assert step_seconds_at([100.0, 200.0], [0.4, 0.2], 150) == pytest.approx(0.3)  # noise: per token
    with pytest.raises(SFTError, match="calibration_steps"):
        step_seconds_at([], [], 100)


class _OrderedTrainer:
    train_dataset = None

    def __init__(self, n: int) -> None:
        self.n = n

    def _get_train_sampler(self, dataset: Any) -> range:
        return range(self.n)


def test_calibration_steps_span_the_epoch(tiny_model: Path) -> None:
    config = _config(tiny_model, max_steps=None, time_budget_s=10, calibration_steps=3, batch_size=2)
    indices, n_steps = calibration_order(_OrderedTrainer(41), config)  # 20 full steps of 2, one short
    assert n_steps == CALIBRATION_WARMUP + 3
    warm, timed = indices[: 2 * CALIBRATION_WARMUP], indices[2 * CALIBRATION_WARMUP :]
    assert warm == list(range(2 * CALIBRATION_WARMUP))  # the run's first (longest) batches
    assert timed == [0, 1, 20, 21, 38, 39]  # first, middle, last full step


def test_config_needs_a_plan(tiny_model: Path) -> None:
    with pytest.raises(ValueError, match="give max_steps or time_budget_s"):
        SFTRunConfig(base_model=str(tiny_model))
    with pytest.raises(ValueError, match="packing_strategy"):
        SFTRunConfig(base_model=str(tiny_model), max_steps=3, packing_strategy="wrapped")  # type: ignore[call-arg]


def test_lora_trains_adapters_and_saves_a_merged_model(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    pytest.importorskip("peft")
    lora = {"r": 4, "alpha": 8, "dropout": 0.0}
    result = run_sft(sft_rows, _config(tiny_model, max_steps=4, save_steps=100, lora=lora), tmp_path)
    assert result.lora and result.adapter_dir and (Path(result.adapter_dir) / "adapter_config.json").is_file()
    before, merged = _weights(tiny_model), _weights(result.model_dir)
    assert before.keys() == merged.keys()  # a plain model, adapters folded in
    assert not torch.equal(before["model.layers.0.self_attn.q_proj.weight"],
                           merged["model.layers.0.self_attn.q_proj.weight"])  # fmt: skip
    assert torch.equal(
        before["model.embed_tokens.weight"], merged["model.embed_tokens.weight"]
    )  # not adapted


def _write_inputs(tiny_model: Path, rows: pa.Table, tmp_path: Path, **kw: Any) -> tuple[Path, Path]:
    data = tmp_path / "sft.parquet"
    pq.write_table(rows, data)
    resolved = tmp_path / "resolved.yaml"
    config = _config(tiny_model, max_steps=3, output_dir=str(tmp_path / "out"), data=str(data), **kw)
    resolved.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    assert load_config(resolved, model=SFTRunConfig) == config
    return resolved, data


def test_entry_point_in_process(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    resolved, _ = _write_inputs(tiny_model, sft_rows, tmp_path)
    assert main(["--config", str(resolved), "save_steps=2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps_run"] == 3 and summary["model_dir"] == str(tmp_path / "out" / "model")
    assert main(["--config", str(resolved), "--resume", "max_steps=5"]) == 2  # the plan cannot change
    assert "max_steps: 3 -> 5" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="did you mean 'max_steps'"):
        load_config(resolved, ["max_step=5"], model=SFTRunConfig)


def test_entry_point_under_accelerate_launch(tiny_model: Path, sft_rows: pa.Table, tmp_path: Path) -> None:
    """The GPU worker's command line, on CPU: `accelerate launch -m coa.train.sft --config ...`."""
    resolved, _ = _write_inputs(tiny_model, sft_rows, tmp_path)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "-m", "coa.train.sft", "--config", str(resolved)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "out" / RESULT_FILE).read_text())["global_step"] == 3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_run_and_accelerate_single_gpu(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    """On a GPU: bf16 is chosen automatically, and the single-GPU accelerate config launches the run."""
    result = run_sft(sft_rows, _config(tiny_model, max_steps=10, save_steps=5), tmp_path / "direct")
    assert result.bf16 is (torch.cuda.is_bf16_supported()) and result.device.startswith("cuda")
    assert (
        result.steps_run == 10
        and result.final_loss is not None
        and result.final_loss < result.loss_curve[0][1]
    )
    packed = run_sft(
        sft_rows, _config(tiny_model, max_steps=5, packing=True, max_length=512), tmp_path / "packed"
    )
    assert packed.steps_run == 5
    resolved, _ = _write_inputs(tiny_model, sft_rows, tmp_path)
    single_gpu = str(REPO / "infra" / "accelerate" / "single_gpu.yaml")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", single_gpu,
           "-m", "coa.train.sft", "--config", str(resolved)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launched = json.loads((tmp_path / "out" / RESULT_FILE).read_text())
    assert launched["bf16"] is True and launched["device"].startswith("cuda") and launched["steps_run"] == 3


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_deepspeed_zero3_config(tiny_model: Path, sft_rows: pa.Table, tmp_path: Path) -> None:
    """The multi-GPU ZeRO-3 accelerate config, on the GPUs this machine has (parameters sharded)."""
    pytest.importorskip("deepspeed")
    resolved, _ = _write_inputs(tiny_model, sft_rows, tmp_path)
    zero3 = str(REPO / "infra" / "accelerate" / "multi_gpu_zero3.yaml")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", zero3,
           "--num_processes", str(torch.cuda.device_count()), "--mixed_precision", "bf16",
           "-m", "coa.train.sft", "--config", str(resolved)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launched = json.loads((tmp_path / "out" / RESULT_FILE).read_text())
    assert launched["steps_run"] == 3 and launched["device"].startswith("cuda")
    tuned = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "model")  # gathered 16-bit weights
    assert tuned.config.vocab_size == AutoModelForCausalLM.from_pretrained(tiny_model).config.vocab_size


def test_heldout_split_is_by_whole_task_and_deterministic(sft_rows: pa.Table) -> None:
    from coa.train.sft_trainer import split_heldout

    train, heldout = split_heldout(sft_rows, 0.1, 64)
    again_train, again_heldout = split_heldout(sft_rows, 0.1, 64)
    assert heldout.num_rows >= 1 and train.num_rows + heldout.num_rows == sft_rows.num_rows
    assert heldout.column("example_id").to_pylist() == again_heldout.column("example_id").to_pylist()
    assert not set(heldout.column("task_id").to_pylist()) & set(train.column("task_id").to_pylist())
    assert split_heldout(sft_rows, 0.0, 64)[1].num_rows == 0
    assert split_heldout(sft_rows, 0.5, 2)[1].num_rows <= 2


def test_overfit_warning_when_heldout_rises_while_training_falls() -> None:
    from coa.train.curves import overfit_warning

    train = [(s, 2.0 - s / 100) for s in range(1, 101)]
    rising = [(25, 1.5), (50, 1.2), (75, 1.4), (100, 1.6)]
    assert "memorising" in (overfit_warning(train, rising) or "")
    falling = [(25, 1.5), (50, 1.2), (75, 1.1), (100, 1.0)]
    assert overfit_warning(train, falling) is None
    assert overfit_warning(train, rising[:2]) is None  # too few points to tell


def test_heldout_loss_is_measured_and_plotted(tiny_model: Path, sft_rows: pa.Table, tmp_path: Path) -> None:
    config = SFTRunConfig(
        base_model=str(tiny_model), max_steps=4, learning_rate=3e-3, batch_size=8, max_length=256,
        logging_steps=1, save_steps=2, heldout_fraction=0.1, eval_steps=2,
    )  # fmt: skip
    result = run_sft(sft_rows, config, tmp_path / "run")
    assert result.n_heldout >= 1 and result.n_examples == sft_rows.num_rows - result.n_heldout
    assert [s for s, _ in result.heldout_loss_curve] == [2, 4]
    assert all(0 < v < 20 for _, v in result.heldout_loss_curve)
    assert Path(result.loss_curve_png).stat().st_size > 0


def test_heldout_loss_leaves_the_trained_weights_alone(
    tiny_model: Path, sft_rows: pa.Table, tmp_path: Path
) -> None:
    # A held-out pass every step, or only at the last: the same weights, bit for bit (CPU, same threads).
    runs = {
        every: run_sft(
            sft_rows, _config(tiny_model, heldout_fraction=0.1, eval_steps=every), tmp_path / str(every)
        )
        for every in (1, 100)
    }
    assert [s for s, _ in runs[1].heldout_loss_curve] == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in runs[100].heldout_loss_curve] == [6]
    often, once = _weights(runs[1].model_dir), _weights(runs[100].model_dir)
    assert often.keys() == once.keys() and all(torch.equal(often[k], once[k]) for k in often)
    assert runs[1].heldout_loss_curve[-1] == runs[100].heldout_loss_curve[-1]


def test_heldout_loss_does_not_depend_on_how_examples_are_batched(
    tiny_model: Path, sft_rows: pa.Table
) -> None:
    from types import SimpleNamespace

    from coa.train.sft_trainer import HeldoutLoss

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    encoded = encode_examples(sft_rows, tokenizer, 256)
    lengths = {len(ids) for ids in encoded.input_ids}
    assert len(lengths) > 1  # padding happens, so batching could matter
    trainer = SimpleNamespace(
        model=AutoModelForCausalLM.from_pretrained(tiny_model), processing_class=tokenizer
    )
    one_by_one = HeldoutLoss(trainer, encoded, every=1, batch_size=1)
    batched = HeldoutLoss(trainer, encoded, every=1, batch_size=8)
    widths = [max(len(encoded.input_ids[i]) for i in b) for b in batched.batches]
    assert widths == sorted(widths)  # batched by length
    assert batched.loss() == pytest.approx(one_by_one.loss(), rel=1e-5)
