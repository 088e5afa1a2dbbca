"""The ``hf_batched`` policy: continuous batching in process gives HF generate's greedy episodes."""

from __future__ import annotations

import math
from pathlib import Path

from coa.rollout import EpisodeSpec, RolloutConfig, rollout
from coa.rollout.policies.hf import HFPolicy
from coa.rollout.policies.hf_batched import HFBatchedPolicy

from .helpers import CHATML, SpyToolBox


def specs_for(policy: HFBatchedPolicy | HFPolicy, n: int) -> list[EpisodeSpec]:
    prompts = [CHATML.format("Solve it.", "What is " + "7 * " * i + "3?") for i in range(n)]  # varied lengths
    return [EpisodeSpec(f"t{i}", policy.codec.encode(p)) for i, p in enumerate(prompts)]


def test_hf_batched_gives_the_same_greedy_episodes_as_hf(tiny_model: Path) -> None:
    config = RolloutConfig(max_turns=2, max_new_tokens=24, max_total_tokens=48, concurrency=3)
    batched = HFBatchedPolicy(str(tiny_model), device="cpu")
    specs = specs_for(batched, 8)  # 3 in flight: later episodes join while others run
    episodes = rollout(specs, batched, SpyToolBox(), config)
    reference = rollout(specs, HFPolicy(str(tiny_model), device="cpu", max_batch=3), SpyToolBox(), config)
    assert [e.completion_ids for e in episodes] == [e.completion_ids for e in reference]
    assert [e.finish for e in episodes] == [e.finish for e in reference]
    for a, b in zip(episodes, reference, strict=True):
        assert a.text == batched.codec.decode(a.completion_ids)
        for x, y, m in zip(a.logprobs, b.logprobs, a.mask, strict=True):
            assert (x is None) == (not m)
            if m:
                assert x is not None and y is not None and math.isclose(x, y, abs_tol=1e-3)
    assert batched.steps < sum(e.completion_tokens for e in episodes)  # episodes shared decode steps


def test_hf_batched_runs_on_the_callers_model_and_samples(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval()
    policy = HFBatchedPolicy.from_model(model, AutoTokenizer.from_pretrained(str(tiny_model)))
    assert policy.model is model and policy.batcher.model is model  # the caller's weights, no copy
    torch.manual_seed(0)
    config = RolloutConfig(
        max_turns=1, max_new_tokens=12, max_total_tokens=12, temperature=1.0, concurrency=4
    )
    spec = specs_for(policy, 1)[0]
    samples = [EpisodeSpec(spec.task_id, spec.prompt_ids, k) for k in range(4)]
    episodes = rollout(samples, policy, SpyToolBox(), config)
    assert len({tuple(e.completion_ids) for e in episodes}) > 1
    assert all(lp is not None and lp <= 0 for e in episodes for lp in e.logprobs[: e.completion_tokens])
