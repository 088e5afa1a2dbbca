"""Clients written for vLLM, unchanged, against ``python -m coa.serve`` (vLLM protocol, dev mode):
TRL 1.16's async GRPO client (readiness, max_model_len, dtype, pause / resume, LoRA load / unload),
TRL's generation client (a batch of token-id prompts, n each, ids and logprobs back), and our own
vLLM adapter's LoRA sync (a new adapter name per version, the old one unloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from coa.engines.vllm import VLLMEngine

from .conftest import ServeProcess

PROMPTS = [[3, 41, 97, 5], [260, 18, 77]]


def lora_folder(tiny_model: Path, folder: Path, seed: int) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    lora = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(str(tiny_model)), lora).save_pretrained(str(folder))
    return folder


def is_paused(serve: ServeProcess) -> bool:
    return bool(httpx.get(f"{serve.root}/is_paused").json()["is_paused"])


def test_trl_clients_drive_coa_serve(
    serve: ServeProcess, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trl.generation.vllm_client as generation
    from accelerate import PartialState
    from trl.experimental.async_grpo.vllm_client import VLLMClient as AsyncClient

    PartialState()  # the async client logs through accelerate's logger, as inside its trainer
    client = AsyncClient(serve.root, server_timeout=30)
    client.wait_for_server_ready(poll_interval_s=0.2)
    assert client.get_max_model_len() > 0
    assert client.get_dtype() == "torch.float32"
    client.pause()  # /pause?mode=keep
    assert is_paused(serve)
    client.resume()
    assert not is_paused(serve)
    client.load_lora_adapter("student-lora", str(lora_folder(tiny_model, tmp_path / "lora", 0)))

    # TRL's generation client imports nothing of vLLM to speak HTTP; only its guard asks for it
    monkeypatch.setattr(generation, "is_vllm_available", lambda: True)
    trl = generation.VLLMClient(base_url=serve.root)
    assert trl.model == "student"
    out: dict[str, Any] = trl.generate(PROMPTS, n=2, temperature=1.0, max_tokens=5, logprobs=0)
    assert out["prompt_ids"] == PROMPTS
    assert len(out["completion_ids"]) == 4 and all(len(ids) <= 5 for ids in out["completion_ids"])
    for ids, logprobs, alternatives in zip(
        out["completion_ids"], out["logprobs"], out["logprob_token_ids"], strict=True
    ):
        assert [row[0] for row in alternatives] == ids and all(row[0] < 0 for row in logprobs)
    greedy = {"temperature": 0.0, "max_tokens": 5, "logprobs": 0}
    base = trl.generate(PROMPTS[:1], **greedy)
    adapted = trl.generate(PROMPTS[:1], **greedy, generation_kwargs={"model": "student-lora"})
    assert base["logprobs"] != adapted["logprobs"]  # the adapter answered its request
    client.unload_lora_adapter("student-lora")
    ids = [m["id"] for m in httpx.get(f"{serve.url}/models").json()["data"]]
    assert ids == ["student"]


def test_vllm_adapter_lora_sync_against_coa_serve(
    serve: ServeProcess, tiny_model: Path, tmp_path: Path
) -> None:
    engine = VLLMEngine(serve.root, "student", weights="worker_extension")
    engine.check()  # dev routes, /server_info's processed logprobs, the worker extension's rpc
    assert engine.logprobs_processed is True
    for version in (1, 2):
        engine.push_adapter(lora_folder(tiny_model, tmp_path / f"v{version}", version), version)
    engine.retire_adapter(1)
    models = [m["id"] for m in httpx.get(f"{serve.url}/models").json()["data"]]
    assert models == ["student", "student-v2"] and engine.request_model() == "student-v2"
    assert engine.ledger.current == 2 and not is_paused(serve)
    engine.retire_adapter(2)  # the served adapter stays
    body = {"model": engine.request_model(), "prompt": PROMPTS[0], "max_tokens": 2, "temperature": 0}
    assert httpx.post(f"{serve.url}/completions", json=body, timeout=60).status_code == 200
    httpx.post(f"{serve.url}/unload_lora_adapter", json={"lora_name": "student-v2"})
    engine.close()
