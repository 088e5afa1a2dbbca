"""``python -m coa.serve`` end to end: the endpoint policy, logprobs, weight updates, adapters."""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from coa.llm.config import EndpointConfig
from coa.rollout import Codec, EpisodeSpec, RolloutConfig, rollout
from coa.rollout.policies.endpoint import EndpointPolicy
from coa.rollout.policies.hf import HFPolicy
from tests.rollout.helpers import CHATML, SpyToolBox

from .conftest import ServeProcess

FIXED = [3, 41, 97, 5, 260, 18, 77, 301, 12, 9, 150, 44]


def load(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder)).eval()


def hf_logprobs(model: Any, ids: list[int]) -> list[float]:
    """log p(ids[i] | ids[:i]) for i >= 1 under ``model``, in process."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:]).view(-1, 1)).view(-1).tolist()


def complete(serve: ServeProcess, **body: Any) -> httpx.Response:
    body = {"model": "student", "max_tokens": 1, "temperature": 0} | body
    return httpx.post(f"{serve.url}/completions", json=body, timeout=60)


def served_logprobs(serve: ServeProcess, ids: list[int], model: str = "student") -> list[float]:
    response = complete(serve, prompt=ids, prompt_logprobs=0, model=model)
    assert response.status_code == 200, response.text
    entries = response.json()["choices"][0]["prompt_logprobs"]
    assert entries[0] is None and len(entries) == len(ids)
    return [entries[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]


def info(serve: ServeProcess) -> dict[str, Any]:
    """The stand-in's own counters, beside vLLM's ``/server_info`` fields."""
    return httpx.get(f"{serve.root}/server_info").json()["coa"]  # type: ignore[no-any-return]


def post(serve: ServeProcess, route: str, **kw: Any) -> httpx.Response:
    return httpx.post(f"{serve.root}{route}", timeout=60, **kw)


def close(a: list[float], b: list[float], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b, strict=True))


def test_endpoint_policy_episodes_equal_hf_generate(
    serve: ServeProcess, tiny_model: Path, codec: Codec
) -> None:
    """The rollout engine's EndpointPolicy against the project's server gives HF generate's greedy
    episodes, id for id, with the model's logprobs; the requests shared decode steps."""
    config = RolloutConfig(max_turns=2, max_new_tokens=20, max_total_tokens=40, concurrency=4)
    specs = [
        EpisodeSpec(f"t{i}", codec.encode(CHATML.format("Solve it.", "What is " + "9 + " * i + "1?")))
        for i in range(8)
    ]
    endpoint = EndpointConfig(
        name="coa-serve", base_url=serve.url, model="student", max_retries=0, timeout_s=60
    )
    before = info(serve)
    served = rollout(specs, EndpointPolicy(endpoint, codec, max_connections=4), SpyToolBox(), config)
    after = info(serve)
    local = rollout(specs, HFPolicy(str(tiny_model), device="cpu", max_batch=4), SpyToolBox(), config)
    assert [e.completion_ids for e in served] == [e.completion_ids for e in local]
    assert [e.finish for e in served] == [e.finish for e in local]
    for s, h in zip(served, local, strict=True):
        assert s.completion_tokens > 0 and s.text == codec.decode(s.completion_ids)
        sampled = [lp for lp, m in zip(s.logprobs, s.mask, strict=True) if m]
        expected = [lp for lp, m in zip(h.logprobs, h.mask, strict=True) if m]
        assert close(sampled, expected, 1e-3)  # type: ignore[arg-type]
    assert all(e.policy_versions == [None] * e.turns for e in served)  # vLLM's protocol reports none
    assert all(e.policy_versions == [None] * e.turns for e in local)  # HF generate reports none
    generated = sum(e.completion_tokens for e in served)
    assert after["steps"] - before["steps"] < generated  # rows shared decode steps (continuous batching)


def test_served_logprobs_follow_weight_updates(serve: ServeProcess, tiny_model: Path, tmp_path: Path) -> None:
    import torch

    base = load(tiny_model)
    assert close(served_logprobs(serve, FIXED), hf_logprobs(base, FIXED))
    assert httpx.get(f"{serve.root}/weight_info").json() == {"weight_version": "default"}

    changed = load(tiny_model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.5)
    changed.save_pretrained(tmp_path / "v1")
    new = hf_logprobs(changed, FIXED)
    old = hf_logprobs(base, FIXED)
    assert max(abs(a - b) for a, b in zip(new, old, strict=True)) > 0.05  # the change is visible

    # vLLM's dev RL routes: pause, start, update {update_info}, finish {weight_version}, resume
    assert post(serve, "/pause", params={"mode": "wait"}).json() == {"status": "paused"}
    assert httpx.get(f"{serve.root}/is_paused").json() == {"is_paused": True}
    assert post(serve, "/start_weight_update", json={"is_checkpoint_format": True}).status_code == 200
    missing = post(serve, "/update_weights", json={"path": str(tmp_path / "v1")})  # coa.serve's old body
    assert missing.status_code == 400 and "Missing 'update_info'" in missing.json()["message"]
    update = post(serve, "/update_weights", json={"update_info": {"path": str(tmp_path / "v1")}})
    assert update.status_code == 200, update.text
    assert post(serve, "/finish_weight_update", json={"weight_version": "step-1"}).status_code == 200
    assert post(serve, "/resume").json() == {"status": "resumed"}
    assert httpx.get(f"{serve.root}/weight_info").json() == {"weight_version": "step-1"}
    response = complete(serve, prompt=FIXED, prompt_logprobs=0)
    assert "weight_version" not in response.json()  # vLLM's completions carry no version
    assert close(served_logprobs(serve, FIXED), new)  # the NEW weights answer, not the old ones

    bad = tmp_path / "bad"
    bad.mkdir()
    from safetensors.torch import save_file

    save_file({"model.embed_tokens.weight": torch.zeros(3, 3)}, str(bad / "model.safetensors"))
    post(serve, "/start_weight_update")
    refused = post(serve, "/update_weights", json={"update_info": {"path": str(bad)}})
    assert refused.status_code == 400 and "shape" in refused.json()["message"]
    assert close(served_logprobs(serve, FIXED), new)  # nothing was half-applied

    base.save_pretrained(tmp_path / "v0")  # the worker extension's route: /collective_rpc
    rpc = {"method": "coa_load_weights", "args": [str(tmp_path / "v0")]}
    assert post(serve, "/collective_rpc", json=rpc).json()["results"][0] > 0
    assert post(serve, "/update_weight_version", json={"new_version": "step-2"}).status_code == 200
    assert httpx.get(f"{serve.root}/weight_info").json() == {"weight_version": "step-2"}
    assert close(served_logprobs(serve, FIXED), old)
    unknown = post(serve, "/collective_rpc", json={"method": "reload_weights"})
    assert unknown.status_code == 500  # a method of a worker extension this server was not started with


def test_adapter_changes_only_requests_naming_it(
    serve: ServeProcess, tiny_model: Path, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False
    )
    adapted = get_peft_model(load(tiny_model), lora).eval()
    adapted.save_pretrained(tmp_path / "lora")
    with_adapter = hf_logprobs(adapted, FIXED)
    without = hf_logprobs(load(tiny_model), FIXED)
    assert max(abs(a - b) for a, b in zip(with_adapter, without, strict=True)) > 0.01

    loaded = httpx.post(
        f"{serve.url}/load_lora_adapter", json={"lora_name": "rl-v1", "lora_path": str(tmp_path / "lora")}
    )
    assert loaded.status_code == 200, loaded.text
    models = {m["id"]: m for m in httpx.get(f"{serve.url}/models").json()["data"]}
    assert models["rl-v1"]["parent"] == "student" and models["student"]["parent"] is None
    names = ["student", "rl-v1"] * 4  # concurrent: base and adapter rows share batches
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda name: served_logprobs(serve, FIXED, name), names))
    for name, logprobs in zip(names, answers, strict=True):
        assert close(logprobs, with_adapter if name == "rl-v1" else without), name
    assert complete(serve, prompt=FIXED, model="rl-v2").status_code == 404
    again = httpx.post(
        f"{serve.url}/load_lora_adapter", json={"lora_name": "rl-v1", "lora_path": str(tmp_path)}
    )
    assert again.status_code == 400
    assert httpx.post(f"{serve.url}/unload_lora_adapter", json={"lora_name": "rl-v1"}).status_code == 200
    assert complete(serve, prompt=FIXED, model="rl-v1").status_code == 404


def test_sampling_seeds_stops_and_bad_requests(serve: ServeProcess) -> None:
    def sample(seed: int) -> dict[str, Any]:
        body = {"prompt": FIXED, "max_tokens": 12, "temperature": 1.0, "top_k": 50, "top_p": 0.9}
        response = complete(serve, seed=seed, logprobs=1, return_token_ids=True, ignore_eos=True, **body)
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]  # type: ignore[no-any-return]

    first, again, other = sample(7), sample(7), sample(8)
    assert first["token_ids"] == again["token_ids"] and first["token_ids"] != other["token_ids"]
    assert first["logprobs"]["token_logprobs"] == again["logprobs"]["token_logprobs"]
    assert len(first["token_ids"]) == 12 and first["finish_reason"] == "length"
    assert first["prompt_token_ids"] == FIXED

    greedy = complete(serve, prompt=FIXED, max_tokens=6, return_token_ids=True, ignore_eos=True).json()
    ids = greedy["choices"][0]["token_ids"]
    stopped = complete(
        serve, prompt=FIXED, max_tokens=6, return_token_ids=True, stop_token_ids=[ids[2]]
    ).json()
    choice = stopped["choices"][0]
    cut = ids.index(ids[2]) + 1
    assert choice["token_ids"] == ids[:cut] and choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == ids[2]

    assert complete(serve, prompt=FIXED, frequency_penalty=0.5).status_code == 400  # not silently ignored
    assert complete(serve, prompt=FIXED, min_p=0.1).status_code == 400
    assert complete(serve, prompt=[10**6]).status_code == 400
    overflow = complete(serve, prompt=FIXED, max_tokens=10**6)
    assert overflow.status_code == 400 and "max_model_len" in overflow.json()["message"]

    # what every vLLM client sends: a batch of prompts, n choices each (prompt-major), ids as tokens
    batch = complete(
        serve,
        prompt=[FIXED, FIXED[:5]],
        n=2,
        seed=3,
        temperature=1.0,
        max_tokens=4,
        min_p=0.0,
        repetition_penalty=1.0,
        logprobs=0,
        return_token_ids=True,
        return_tokens_as_token_ids=True,
        ignore_eos=True,
        vllm_xargs={"ignored": "as vLLM ignores unknown fields"},
    )
    assert batch.status_code == 200, batch.text
    choices = batch.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in choices] == [FIXED, FIXED, FIXED[:5], FIXED[:5]]
    assert all(c["logprobs"]["tokens"] == [f"token_id:{t}" for t in c["token_ids"]] for c in choices)


def test_requests_wait_while_paused(serve: ServeProcess) -> None:
    assert httpx.post(f"{serve.root}/pause", params={"mode": "keep"}).status_code == 200
    box: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: box.setdefault("r", complete(serve, prompt=FIXED)))
    try:
        thread.start()
        time.sleep(0.5)
        assert "r" not in box and info(serve)["waiting"] == 1
    finally:
        httpx.post(f"{serve.root}/resume")
    thread.join(30)
    assert box["r"].status_code == 200


def test_missing_model_folder_exits_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "coa.serve", "--model", str(tmp_path / "none")], capture_output=True, text=True
    )
    assert done.returncode == 2 and "no config.json" in done.stderr and len(done.stderr.splitlines()) == 1
