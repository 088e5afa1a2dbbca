"""Short CPU GRPO runs on a tiny model: weights move, rollouts are a valid table, resume, guards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

import schemas
from coa.kit.run import CHECKPOINTS_DIR, last_checkpoint
from coa.rl.config import EntropyCollapse, RLError, RLRunConfig, RLStepCountError
from coa.rl.grpo import run_rl
from coa.rl.rollout_hook import ROLLOUTS_DIR
from coa.rollout import Codec
from coa.tools.config import ToolsConfig

from .helpers import TwoTurnPolicy, prompts_table

N_PROMPTS = 6
QUESTIONS = [(100 + i, 200 + 3 * i) for i in range(N_PROMPTS)]


def config(model: Path, **kw: Any) -> RLRunConfig:
    values: dict[str, Any] = {
        "base_model": str(model),
        "max_steps": 4,
        "prompts_per_step": 2,
        "group_size": 4,
        "steps_per_generation": 2,
        "save_steps": 2,
        "learning_rate": 1e-2,
        "entropy_floor": None,
        "tools": ToolsConfig(enabled=("code",), record="off"),
    }
    return RLRunConfig(**(values | kw))


def scripted(policies: list[TwoTurnPolicy], right_every: int = 2) -> Any:
    def factory(model: Any, tokenizer: Any) -> TwoTurnPolicy:
        policy = TwoTurnPolicy(Codec(tokenizer), QUESTIONS, right_every)
        policies.append(policy)
        return policy

    return factory


def weights(path: Path) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


@pytest.mark.sandbox
def test_short_run_moves_weights_and_keeps_every_rollout(tiny_model: Path, tmp_path: Path) -> None:
    policies: list[TwoTurnPolicy] = []
    result = run_rl(
        prompts_table(N_PROMPTS), config(tiny_model), tmp_path / "run", policy_factory=scripted(policies)
    )
    assert result.global_step == 4 and result.steps_run == 4
    before, after = weights(tiny_model), weights(Path(result.model_dir))
    assert any(not torch.equal(before[k], after[k]) for k in before)
    table = pq.read_table(result.rollouts_file)
    assert schemas.ROLLOUT.check(table).ok
    assert set(table.column("step").to_pylist()) == {0, 2}  # two generation batches, 2 optimizer steps each
    kept = table.filter(table.column("kept"))
    assert kept.num_rows == 2 * 2 * 4
    # the trained ids are the sampled ids: each kept completion is the policy's generations with the
    # environment's ids between them, and the mask-1 ids are exactly those generations, in order
    sampled = {tuple(g.ids) for p in policies for g in p.generations}
    for ids, mask in zip(
        kept.column("completion_ids").to_pylist(), kept.column("loss_mask").to_pylist(), strict=True
    ):
        runs, run = [], []
        for token, m in zip(ids, mask, strict=True):
            if m:
                run.append(token)
            elif run:
                runs.append(tuple(run))
                run = []
        assert len(runs) == 2 and all(r in sampled for r in runs)
    assert {"rewards/correct/mean", "entropy", "dynamic/zero_variance_share"} <= set(result.curves[-1])
    assert Path(result.curves_png).is_file()


class _Kill(TrainerCallback):
    """Dies right after the checkpoint of ``step`` is written, like a killed worker."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            raise KeyboardInterrupt(f"killed after checkpoint {self.step}")


class _StopEarly(TrainerCallback):
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        control.should_training_stop = True


@pytest.mark.sandbox
def test_a_killed_run_resumes_from_its_checkpoint(tiny_model: Path, tmp_path: Path) -> None:
    out, prompts = tmp_path / "run", prompts_table(N_PROMPTS)
    with pytest.raises(KeyboardInterrupt):
        run_rl(
            prompts,
            config(tiny_model, heldout_eval_steps=2),
            out,
            callbacks=[_Kill(2)],
            policy_factory=scripted([]),
        )
    last = last_checkpoint(out / CHECKPOINTS_DIR)
    assert last is not None and last.name == "checkpoint-2"
    with pytest.raises(Exception, match="already holds checkpoints"):
        run_rl(prompts, config(tiny_model, heldout_eval_steps=2), out, policy_factory=scripted([]))
    with pytest.raises(RLError, match=r"changed training config \(learning_rate"):
        run_rl(
            prompts,
            config(tiny_model, heldout_eval_steps=2, learning_rate=1e-3),
            out,
            resume=True,
            policy_factory=scripted([]),
        )
    result = run_rl(
        prompts, config(tiny_model, heldout_eval_steps=2), out, resume=True, policy_factory=scripted([])
    )
    assert (result.start_step, result.steps_run, result.global_step) == (2, 2, 4)
    assert [p["step"] for p in result.heldout] == [0.0, 2.0, 4.0]  # kept up to the checkpoint, then on
    table = pq.read_table(result.rollouts_file)
    assert sorted(set(table.column("step").to_pylist())) == [0, 2]
    assert table.filter(table.column("kept")).num_rows == 16  # each batch once, none repeated by the resume
    assert sorted(p.name for p in (out / ROLLOUTS_DIR).iterdir()) == [
        "step-000000.parquet",
        "step-000002.parquet",
    ]
    # resuming a finished run (killed while writing its model) takes no step and reports the same
    # model and held-out curve (the kit's final-checkpoint path, shared with SFT)
    trained = weights(Path(result.model_dir))
    again = run_rl(
        prompts, config(tiny_model, heldout_eval_steps=2), out, resume=True, policy_factory=scripted([])
    )
    assert (again.start_step, again.steps_run, again.global_step) == (4, 0, 4)
    assert again.heldout == result.heldout and again.curves == result.curves
    reloaded = weights(Path(again.model_dir))
    assert all(torch.equal(trained[k], reloaded[k]) for k in trained)


@pytest.mark.sandbox
def test_the_steps_run_guard_holds(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(RLStepCountError, match="took 1 optimizer steps in this run but the plan was 4"):
        run_rl(prompts_table(N_PROMPTS), config(tiny_model), tmp_path / "run", callbacks=[_StopEarly()],
               policy_factory=scripted([]))  # fmt: skip
    assert not (tmp_path / "run" / "model").exists()


@pytest.mark.sandbox
def test_entropy_collapse_stops_the_run_with_a_clear_message(tiny_model: Path, tmp_path: Path) -> None:
    cfg = config(tiny_model, entropy_floor=50.0, entropy_grace_steps=0)  # a random model has ~6 nats
    with pytest.raises(
        EntropyCollapse, match=r"entropy collapse: mean token entropy \d+\.\d+ nats fell below"
    ):
        run_rl(prompts_table(N_PROMPTS), cfg, tmp_path / "run", policy_factory=scripted([]))
    assert not (tmp_path / "run" / "model").exists()


@pytest.mark.cuda
def test_accelerate_launch_runs_the_rl_stage_on_a_gpu(tiny_model: Path, tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: the RL stage is launched with `accelerate launch` only there")
    from coa.kit.launch import launch_accelerate
    from coa.rl.config import RL, RLResult

    cfg = config(tiny_model, max_steps=2, max_new_tokens=32, max_total_tokens=64, max_turns=2)
    launched = launch_accelerate(
        RL, prompts_table(N_PROMPTS), cfg, tmp_path / "run", "infra/accelerate/single_gpu.yaml"
    )
    result = RLResult.model_validate(launched)
    assert result.global_step == 2 and result.device.startswith("cuda")
    assert schemas.ROLLOUT.check(pq.read_table(result.rollouts_file)).ok


@pytest.mark.serial  # plans from measured step times
@pytest.mark.sandbox
def test_a_time_budget_ends_the_run_on_a_refitted_plan(tiny_model: Path, tmp_path: Path) -> None:
    cfg = config(tiny_model, max_steps=40, time_budget_s=0.5)
    result = run_rl(prompts_table(N_PROMPTS), cfg, tmp_path / "run", policy_factory=scripted([]))
    # re-planned from the measured step time: far fewer than the 40-step cap, and the guard agrees
    assert 2 <= result.global_step == result.steps_planned < 40
    assert result.time_budget_s == 0.5 and result.train_runtime_s < 20


@pytest.mark.sandbox
def test_heldout_score_is_measured_and_a_reward_hack_raises_the_alarm(
    tiny_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A scripted policy that games the training prompts while the held-out prompt goes wrong.

    Policies are made in this order: the held-out eval before step 0, the generation of steps 1-2,
    the eval at step 2, the generation of steps 3-4, the eval at step 4. Training answers go from
    all wrong to all right (reward 0.1 -> 1.1); the held-out prompt is right at step 0, wrong after.
    """
    from coa.rl.heldout import HELDOUT_FILE, split_prompts

    prompts = prompts_table(N_PROMPTS)
    _, held = split_prompts(prompts.to_pylist(), 0.2, 32)
    assert len(held) == 1
    a, b = (
        int(x)
        for x in held[0]["prompt"][1]["content"].removeprefix("What is ").removesuffix("?").split(" + ")
    )
    made: list[TwoTurnPolicy] = []

    def factory(model: Any, tokenizer: Any) -> TwoTurnPolicy:
        k = len(made)
        never = [(a, b)] if k >= 2 else []
        policy = TwoTurnPolicy(
            Codec(tokenizer), QUESTIONS, right_every=1 if k in (0, 3) else 0, never_right=never
        )
        made.append(policy)
        return policy

    cfg = config(tiny_model, heldout_eval_steps=2, heldout_fraction=0.2, max_refill_rounds=0)
    with caplog.at_level("WARNING", logger="coa.rl"):
        result = run_rl(prompts, cfg, tmp_path / "run", policy_factory=factory)
    assert len(made) == 5
    assert result.heldout_prompts == 1
    assert [(p["step"], p["correct"]) for p in result.heldout] == [(0.0, 1.0), (2.0, 0.0), (4.0, 0.0)]
    assert all(p["tokens"] > 0 for p in result.heldout)
    assert [p["reward"] for p in result.curves] == [0.0, 1.0]  # steps 1 and 3: the reward the policy games
    assert result.alarm is not None and result.alarm.startswith("reward-hacking alarm at step 4:")
    assert any(r.levelname == "WARNING" and "reward-hacking alarm" in r.getMessage() for r in caplog.records)
    # the held-out prompt never trained
    trained = set(pq.read_table(result.rollouts_file).column("prompt_id").to_pylist())
    assert held[0]["prompt_id"] not in trained and len(trained) >= 2
    saved = (tmp_path / "run" / HELDOUT_FILE).read_text()
    assert '"step": 4' in saved and "reward-hacking alarm" in saved
