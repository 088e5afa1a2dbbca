"""``python -m coa.serve --protocol sglang``: SGLang 0.5.23's admin routes and completion metadata.
A generation running across ``retract`` → ``update_weights_from_disk`` → ``continue`` reports two
version spans (its KV recomputed on the new weights); ``in_place`` keeps it running on old KV."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import ServeProcess

FIXED = [3, 41, 97, 5, 260, 18]


@pytest.fixture(scope="module")
def sglang(tiny_model: Path) -> Iterator[ServeProcess]:
    flags = ("--served-model-name", "student", "--protocol", "sglang", "--delay-per-token-ms", "30")
    server = ServeProcess(tiny_model, *flags, dev_mode=False)
    try:
        server.wait_ready()
        yield server
    finally:
        assert server.stop() == 0


def post(serve: ServeProcess, route: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{serve.root}{route}", json=body, timeout=60)


def changed_model(tiny_model: Path, folder: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1)
    model.save_pretrained(str(folder))
    return folder


def long_request(serve: ServeProcess, box: dict[str, Any]) -> threading.Thread:
    body = {"model": "student", "prompt": FIXED, "max_tokens": 40, "temperature": 0, "ignore_eos": True,
            "return_token_ids": True, "logprobs": 1}  # fmt: skip
    thread = threading.Thread(
        target=lambda: box.setdefault("r", httpx.post(f"{serve.url}/completions", json=body, timeout=120))
    )
    thread.start()
    time.sleep(0.5)  # some tokens generated on the old weights
    return thread


@pytest.mark.parametrize("mode", ["retract", "in_place"])
def test_a_push_mid_generation_shows_in_the_spans(
    sglang: ServeProcess, tiny_model: Path, tmp_path: Path, mode: str
) -> None:
    assert httpx.get(f"{sglang.root}/v1/models").json()["data"][0]["owned_by"] == "sglang"
    assert httpx.get(f"{sglang.root}/pause").status_code == 404  # vLLM's routes are not there
    box: dict[str, Any] = {}
    thread = long_request(sglang, box)
    assert post(sglang, "/pause_generation", {"mode": mode}).json()["status"] == "ok"
    version = f"{mode}-1"
    folder = changed_model(tiny_model, tmp_path / "v1")
    update = post(sglang, "/update_weights_from_disk", {"model_path": str(folder), "weight_version": version})
    assert update.status_code == 200 and update.json()["success"] is True
    assert post(sglang, "/continue_generation", {}).status_code == 200
    thread.join(120)
    payload = box["r"].json()
    spans = payload["metadata"]["weight_versions"]
    assert len(spans) == 2 and spans[1]["version"] == version, spans
    assert spans[0]["start"] == 0 and spans[0]["end"] == spans[1]["start"] > 0
    assert spans[1]["end"] == len(payload["choices"][0]["token_ids"]) == 40
    assert payload["metadata"]["weight_version"] == version
    assert httpx.get(f"{sglang.root}/model_info").json()["weight_version"] == version
    assert "matched_stop" in payload["choices"][0] and "stop_reason" not in payload["choices"][0]


def test_a_hub_id_or_a_file_is_refused(sglang: ServeProcess, tmp_path: Path) -> None:
    refused = post(sglang, "/update_weights_from_disk", {"model_path": "Qwen/Qwen2.5-0.5B"})
    assert refused.status_code == 400 and refused.json()["success"] is False
    assert "config.json" in refused.json()["message"]
