"""``rl.rollout.backend: hf_batched``: RL's episodes on continuous batching in process equal ``hf``'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa.rl.config import RLStageConfig
from coa.rl.rollout_hook import policy_on_weights
from coa.rl.rollouts import RolloutSource
from coa.rollout.policies.hf import HFPolicy
from coa.rollout.policies.hf_batched import HFBatchedPolicy
from tests.rollout.helpers import SpyToolBox
from tests.rollout.test_hf_batched import question, scripted_student  # noqa: F401 (fixture)
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse fixture)

from .helpers import math_prompt


def test_hf_batched_gives_rl_the_same_greedy_episodes_as_hf(scripted_student: Path) -> None:  # noqa: F811
    """The demo student (overfit to a plan + code call, then an answer) on RL's own rollout source:
    the policy RL builds for each backend on the trainer's model gives the same greedy episodes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompts = []
    for i in range(6):
        row = math_prompt(i, 7, 3)
        row["prompt"] = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": question(i)}]
        prompts.append(row)
    model = AutoModelForCausalLM.from_pretrained(str(scripted_student)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(scripted_student))
    runs = {}
    for backend in ("hf", "hf_batched"):
        params = RLStageConfig(
            prompts_per_step=2, group_size=2, max_turns=3, max_new_tokens=64, max_total_tokens=160,
            rollout={"backend": backend},
        )  # fmt: skip
        policy = policy_on_weights(model, tokenizer, params, None)
        assert isinstance(policy, HFBatchedPolicy if backend == "hf_batched" else HFPolicy)
        source = RolloutSource(prompts, params, SpyToolBox(), greedy=True)
        runs[backend], _ = source.episodes(source.order, policy, 1)
    hf, batched = runs["hf"], runs["hf_batched"]
    assert sum(len(e.tool_calls) >= 1 and e.turns >= 2 for e in hf) >= 4  # multi-turn, with tools
    assert [e.completion_ids for e in batched] == [e.completion_ids for e in hf]
    assert [e.finish for e in batched] == [e.finish for e in hf]
    assert [e.mask for e in batched] == [e.mask for e in hf]


@pytest.mark.sandbox
def test_a_short_rl_run_generates_on_hf_batched(tiny_model: Path, tmp_path: Path) -> None:
    """The backend end to end under TRL: episodes on the trainer's weights through continuous
    batching, each row naming the step whose weights sampled it, with its behaviour logprobs."""
    import pyarrow.parquet as pq

    from coa.rl.config import RLRunConfig
    from coa.rl.grpo import run_rl
    from coa.tools.config import ToolsConfig

    from .helpers import prompts_table

    config = RLRunConfig(
        base_model=str(tiny_model), max_steps=2, prompts_per_step=2, group_size=2, steps_per_generation=1,
        save_steps=1, learning_rate=1e-2, entropy_floor=None, max_turns=1, max_new_tokens=16,
        max_total_tokens=16, overlong_buffer=16, mask_truncated=False, is_correction="tis",
        tools=ToolsConfig(enabled=("code",), record="off"), rollout={"backend": "hf_batched"},
    )  # fmt: skip
    result = run_rl(prompts_table(4), config, tmp_path / "run")
    assert result.global_step == 2 and result.rollout_backend == "hf_batched"
    rows = pq.read_table(result.rollouts_file).to_pylist()
    assert {r["step"] for r in rows} == {0, 1} and all(r["policy_version"] == r["step"] for r in rows)
    for r in rows:
        assert [lp is not None for lp in r["behaviour_logprobs"]] == [bool(m) for m in r["loss_mask"]]
    # on the trainer's own weights the behaviour and trainer logprobs agree: TIS weights ~1
    assert all(abs(p["tis/weight_mean"] - 1.0) < 1e-2 for p in result.curves)
