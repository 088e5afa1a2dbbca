"""Short CPU GRPO runs on a tiny model: weights move, rollouts are a valid table, resume, guards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

import schemas
from coa.rl.config import EntropyCollapse, RLRunConfig, RLStepCountError
from coa.rl.grpo import CHECKPOINTS_DIR, ROLLOUTS_DIR, last_checkpoint, run_rl
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
    result = run_rl(prompts_table(N_PROMPTS), config(tiny_model), tmp_path / "run", policy_factory=scripted(policies))
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
    for ids, mask in zip(kept.column("completion_ids").to_pylist(), kept.column("loss_mask").to_pylist(), strict=True):
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
