"""The ``hf_batched`` policy: continuous batching in process gives HF generate's greedy episodes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from coa.format import Segment
from coa.format.codec import render_segment
from coa.rollout import Codec, EpisodeSpec, RolloutConfig, rollout
from coa.rollout.policies.hf import HFPolicy
from coa.rollout.policies.hf_batched import HFBatchedPolicy
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse: two threads made these rollouts ~40x slower)

from .helpers import ANSWER, CHATML, SpyToolBox, code_turn


def question(i: int) -> str:
    return "What is " + "7 * " * i + "3?"


@pytest.fixture(scope="module")
def scripted_student(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model overfit (a few seconds) to a two-turn CoA script: plan + code call, then answer,
    so greedy episodes make a tool call and a second turn (a random model never closes a tag)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    codec = Codec.from_pretrained(str(tiny_model))
    observation = render_segment(Segment("observation", "42"))
    script = code_turn("print(6 * 7)") + "\n" + observation + ANSWER
    sequences = [codec.encode(CHATML.format("Solve it.", question(i)) + script) for i in range(4)]
    width = max(map(len, sequences))
    ids = torch.full((len(sequences), width), codec.pad_id)
    labels = torch.full((len(sequences), width), -100)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = labels[row, : len(sequence)] = torch.tensor(sequence)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # two threads on a shared 2-core host ran each step 7x slower
    try:
        for _ in range(60):
            model(ids, attention_mask=(labels != -100).long(), labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    folder = tmp_path_factory.mktemp("scripted") / "model"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tiny_model)).save_pretrained(folder)
    return folder


def specs_for(policy: HFBatchedPolicy | HFPolicy, n: int) -> list[EpisodeSpec]:
    prompts = [CHATML.format("Solve it.", question(i)) for i in range(n)]  # varied lengths
    return [EpisodeSpec(f"t{i}", policy.codec.encode(p)) for i, p in enumerate(prompts)]


def test_hf_batched_gives_the_same_greedy_episodes_as_hf(scripted_student: Path) -> None:
    config = RolloutConfig(max_turns=3, max_new_tokens=64, max_total_tokens=160, concurrency=3)
    batched = HFBatchedPolicy(str(scripted_student), device="cpu")
    specs = specs_for(batched, 8)  # 3 in flight: later episodes and later turns join running batches
    episodes = rollout(specs, batched, SpyToolBox(), config)
    reference = rollout(
        specs, HFPolicy(str(scripted_student), device="cpu", max_batch=3), SpyToolBox(), config
    )
    assert sum(e.turns >= 2 and len(e.tool_calls) >= 1 for e in episodes) >= 4  # multi-turn, with tools
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


@pytest.mark.cuda
def test_hf_gives_the_same_greedy_episodes_on_cuda(scripted_student: Path) -> None:
    """On a GPU the ``hf`` policy's ``generate`` (a static cache, called from the engine's worker
    thread) runs eagerly: transformers would otherwise compile it with CUDA graphs, which failed in
    that thread (H200, 2026-11-28: evaluation of the GPU demo stopped at its first batch)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    config = RolloutConfig(max_turns=3, max_new_tokens=64, max_total_tokens=160, concurrency=3)
    on_gpu = HFPolicy(str(scripted_student), device="cuda", max_batch=3)
    specs = specs_for(on_gpu, 6)
    episodes = rollout(specs, on_gpu, SpyToolBox(), config)
    reference = rollout(
        specs, HFPolicy(str(scripted_student), device="cpu", max_batch=3), SpyToolBox(), config
    )
    assert sum(e.turns >= 2 and len(e.tool_calls) >= 1 for e in episodes) >= 3
    assert [e.finish for e in episodes] == [e.finish for e in reference]
    assert [e.completion_ids for e in episodes] == [e.completion_ids for e in reference]
