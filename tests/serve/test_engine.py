"""The continuous batcher alone: requests join a running batch; per-row sampling cuts; weight assignment."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from coa.serve.engine import ContinuousBatcher, GenRequest
from coa.serve.sampling import filtered_probs
from coa.serve.weights import assign_weights


def run(batcher: ContinuousBatcher, request: GenRequest) -> threading.Event:
    finished = threading.Event()
    request.done = lambda _: finished.set()
    batcher.submit(request)
    return finished


def test_a_request_joins_the_running_batch_and_leaves_first(tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval()
    batcher = ContinuousBatcher(model, delay_per_token_s=0.01)
    batcher.start()
    try:
        long = GenRequest(prompt=[5, 6, 7], max_tokens=60, temperature=0)
        long_done = run(batcher, long)
        while len(long.ids) < 10:  # the long one is generating
            assert not long_done.wait(0.01)
        short = GenRequest(prompt=[9, 8, 7, 6, 5, 4, 3], max_tokens=5, temperature=0)
        assert run(batcher, short).wait(30)
        assert not long_done.is_set() and len(short.ids) == 5 and short.finish == "length"
        assert long_done.wait(30) and len(long.ids) == 60
        assert batcher.steps < 60 + 5  # the short one rode along in the long one's steps
        alone = GenRequest(prompt=[9, 8, 7, 6, 5, 4, 3], max_tokens=5, temperature=0)
        assert run(batcher, alone).wait(30) and alone.ids == short.ids  # joining changed nothing
    finally:
        batcher.stop()


@pytest.mark.cuda
def test_the_batcher_runs_on_the_models_device(tiny_model: Path) -> None:
    """On a GPU every tensor the batcher builds sits beside the weights: rows join and leave a
    running batch (the retire index), sampled rows cut by top-k/top-p, seeded rows (drawn on the
    CPU, where their generator lives) repeat, and prompt logprobs come back."""
    import torch
    from transformers import AutoModelForCausalLM

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model)).to("cuda").eval()
    batcher = ContinuousBatcher(model)
    batcher.start()
    try:

        def requests() -> list[GenRequest]:
            return [
                GenRequest(prompt=[5, 6, 7], max_tokens=40, temperature=0),
                GenRequest(prompt=[9, 8, 7, 6], max_tokens=7, temperature=1.0, top_p=0.9, top_k=20),
                GenRequest(prompt=[4, 4], max_tokens=12, temperature=0.8, seed=3, prompt_logprobs=2),
                GenRequest(prompt=[3, 1, 4, 1, 5], max_tokens=25, temperature=0.7, seed=7, logprobs=1),
            ]

        runs = []
        for _ in range(2):
            batch = requests()
            events = [run(batcher, r) for r in batch]
            assert all(e.wait(60) for e in events)
            assert [r.error for r in batch] == [None] * 4
            assert [len(r.ids) for r in batch] == [r.max_tokens for r in batch] or all(
                r.finish for r in batch
            )
            runs.append(batch)
        first, second = runs
        assert first[0].ids == second[0].ids  # greedy
        assert first[2].ids == second[2].ids and first[3].ids == second[3].ids  # seeded
        assert len(first[2].prompt_logprob_values) == 2 and len(first[3].token_logprobs) == len(first[3].ids)
    finally:
        batcher.stop()


def test_top_k_and_top_p_cuts_per_row() -> None:
    import torch

    logprobs = torch.log_softmax(torch.tensor([[4.0, 3.0, 2.0, 1.0], [4.0, 3.0, 2.0, 1.0]]), -1)
    probs = filtered_probs(logprobs, [2, 0], [1.0, 0.7])
    assert (probs[0] > 0).tolist() == [True, True, False, False]
    # row 2: p(first) = 0.64 < 0.7, so the second survives; the mass above the third is 0.88 >= 0.7
    assert (probs[1] > 0).tolist() == [True, True, False, False]
    assert torch.allclose(probs.sum(-1), torch.ones(2))


def test_assign_weights_refuses_a_mismatch_before_copying(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    before = model.model.embed_tokens.weight.clone()
    with pytest.raises(ValueError, match="shape"):
        assign_weights(model, {"model.embed_tokens.weight": before + 1, "model.norm.weight": torch.zeros(3)})
    assert torch.equal(model.model.embed_tokens.weight, before)
    assert assign_weights(model, {"model.embed_tokens.weight": before + 1}) == 1
    assert torch.equal(model.model.embed_tokens.weight, before + 1)
