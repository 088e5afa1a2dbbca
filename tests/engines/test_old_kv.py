"""A weight push while a request is in flight, per engine mode, against coa.serve: the adapter's
``old_kv`` flag is true exactly when the completion used old-weight KV, and false where the engine
dropped it (vLLM ``keep`` with its default ``clear_cache=true``, SGLang ``retract``) or let the request
finish first (``wait``).

What the completion used is read off its logprobs (greedy, so raw ``log_softmax``): each token's
logprob is either the old weights' (computed before the push), the new weights' over a prefix
prefilled again on them (the KV dropped), or neither: new weights over the old weights' KV."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from coa.engines import EngineClient
from coa.engines.sglang import SGLangEngine
from coa.engines.vllm import VLLMEngine
from tests.serve.conftest import ServeProcess

PROMPT = [3, 41, 97, 5, 260, 18]
TOKENS = 24


@pytest.fixture(scope="module")
def pushed(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with every weight moved: the version a push loads."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    folder = tmp_path_factory.mktemp("pushed") / "v000001"
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def logprobs_of(folder: Path, ids: Sequence[int]) -> list[float]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([list(ids)])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:]).view(-1, 1)).view(-1).tolist()


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tiny_model: Path) -> Iterator[ServeProcess]:
    """One coa.serve per protocol for the module; each case puts the base weights back first."""
    protocol = request.param
    extra = ("--protocol", "sglang") if protocol == "sglang" else ()
    serve = ServeProcess(
        tiny_model, "--served-model-name", "student", "--delay-per-token-ms", "40", *extra,
        dev_mode=protocol == "vllm",
    )  # fmt: skip
    try:
        serve.wait_ready()
        yield serve
    finally:
        serve.stop()


def restore_base(server: ServeProcess, tiny_model: Path) -> None:
    """The server back on the base weights, under a version name no ledger number equals."""
    if httpx.get(f"{server.root}/model_info").status_code == 200:  # SGLang's route
        body = {"model_path": str(tiny_model), "weight_version": "base"}
        assert httpx.post(f"{server.root}/update_weights_from_disk", json=body, timeout=60).json()["success"]
        return
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(tiny_model)}}
    assert httpx.post(f"{server.root}/collective_rpc", json=rpc, timeout=60).status_code == 200
    version = {"new_version": "base"}
    assert httpx.post(f"{server.root}/update_weight_version", json=version).status_code == 200


def raw_keep_push(root: str, folder: Path) -> None:
    """TRL 1.16's client's pause (``/pause?mode=keep``, ``clear_cache`` left at vLLM's default)."""
    assert httpx.post(f"{root}/pause", params={"mode": "keep"}).status_code == 200
    body = {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}}
    assert httpx.post(f"{root}/collective_rpc", json=body, timeout=60).status_code == 200
    assert httpx.post(f"{root}/resume").status_code == 200


def kv_used(old: list[float], new: list[float], got: list[float]) -> tuple[bool, bool]:
    """(some token ran on the new weights over old KV, some token ran on the new weights at all)."""
    near = [(math.isclose(g, o, abs_tol=2e-3), math.isclose(g, n, abs_tol=2e-3)) for g, o, n in zip(
        got, old, new, strict=True)]  # fmt: skip
    return any(not a and not b for a, b in near), any(not a for a, _ in near)


CASES = {
    # case: (protocol, adapter, or None for TRL's raw keep; old KV expected)
    "vllm-keep": ("vllm", lambda root: VLLMEngine(root, "student", pause_mode="keep"), True),
    "vllm-wait": ("vllm", lambda root: VLLMEngine(root, "student", pause_mode="wait"), False),
    "vllm-keep-clear-cache": ("vllm", None, False),
    "sglang-in_place": ("sglang", lambda root: SGLangEngine(root, "student", pause_mode="in_place"), True),
    "sglang-retract": ("sglang", lambda root: SGLangEngine(root, "student", pause_mode="retract"), False),
}


@pytest.mark.parametrize(
    ("case", "server"), [(case, protocol) for case, (protocol, _, _) in CASES.items()], indirect=["server"]
)
def test_old_kv_is_flagged_exactly_when_it_was_used(
    case: str, server: ServeProcess, tiny_model: Path, pushed: Path
) -> None:
    _, make, expected = CASES[case]
    restore_base(server, tiny_model)
    engine: EngineClient = (make or (lambda root: VLLMEngine(root, "student")))(server.root)
    engine.check()
    stamped = engine.ledger.stamp()
    body: dict[str, Any] = {
        "model": engine.request_model(stamped), "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0,
        "logprobs": 0, "return_token_ids": True, "ignore_eos": True, "cache_salt": engine.cache_salt(stamped),
    }  # fmt: skip
    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.setdefault("r", httpx.post(f"{server.url}/completions", json=body, timeout=60))
    )
    thread.start()
    time.sleep(0.3)  # a few tokens generated on the old weights
    if make is None:
        raw_keep_push(server.root, pushed)
        engine.ledger.set(1)
    else:
        engine.push_weights(pushed, 1)
    thread.join(60)
    engine.ledger.release(stamped)
    payload = box["r"].json()
    choice = payload["choices"][0]
    ids, got = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    full = PROMPT + ids
    old, new = (logprobs_of(folder, full)[len(PROMPT) - 1 :] for folder in (tiny_model, pushed))
    used_old_kv, ran_on_new = kv_used(old, new, got)
    assert math.isclose(got[0], old[0], abs_tol=2e-3)  # the first token: the old weights
    assert used_old_kv is expected
    if make is not None:  # the flag the rollout row records (TRL's raw pause is no adapter's push)
        assert engine.old_kv(stamped, payload) is expected
    assert ran_on_new is (case != "vllm-wait")  # the push landed mid-generation, except under wait
    engine.close()
