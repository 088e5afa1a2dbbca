"""The policy's side of the engines: request bodies every engine accepts, recorded answers parsed,
versions stamped by the client (and engine reports checked), seeds, context overflow, the version
directories' lifetime, and the vLLM worker extension's loader."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from coa.engines import ContextOverflow, WeightLedger
from coa.engines.sglang import SGLangEngine
from coa.engines.vllm import VLLMEngine
from coa.engines.worker_extension import WeightLoader
from coa.llm.config import EndpointConfig
from coa.rollout import Codec, Sampling
from coa.rollout.policies.endpoint import EndpointPolicy
from tests.engines import protocols as P
from tests.serve.conftest import ServeProcess

ENDPOINT = EndpointConfig(name="e", base_url="http://engine/v1", model="student", max_retries=0)


def offline(engine: Any) -> Any:
    return engine("http://engine", "student", transport=httpx.MockTransport(lambda r: httpx.Response(500)))


def answered(policy: EndpointPolicy, payload: dict[str, Any], push_to: int | None = None) -> Any:
    """Run ``generate`` with the engine's recorded answer in place of the HTTP round trip
    (``push_to``: a weight push lands while the request runs)."""
    seen: dict[str, Any] = {}

    async def post(data: bytes, prompt_len: int, max_new: int) -> dict[str, Any]:
        seen["in_flight"] = dict(policy.engine.ledger.in_flight) if policy.engine else {}
        if push_to is not None and policy.engine is not None:
            policy.engine.ledger.set(push_to)
        return payload

    policy._post = post  # type: ignore[method-assign,assignment]
    policy._session = object()
    generation = asyncio.run(policy.generate([1, 2, 3], 8, Sampling(1.0)))
    return generation, seen


def test_request_bodies_use_only_fields_both_engines_declare(codec: Codec) -> None:
    policy = EndpointPolicy(ENDPOINT, codec, engine=offline(VLLMEngine), seed=5)
    bodies = [policy.body([1, 2, 3], 8, Sampling(0.7, 0.9, 20)) for _ in range(3)]
    for body in bodies:
        assert set(body) <= P.VLLM_COMPLETION_FIELDS, set(body) - P.VLLM_COMPLETION_FIELDS
        assert set(body) <= P.SGLANG_COMPLETION_FIELDS, set(body) - P.SGLANG_COMPLETION_FIELDS
    seeds = [b["seed"] for b in bodies]
    assert len(set(seeds)) == 3  # every request seeded, each differently
    again = EndpointPolicy(ENDPOINT, codec, engine=offline(VLLMEngine), seed=5)
    assert [again.body([1], 8, Sampling(1.0))["seed"] for _ in range(3)] == seeds  # reproducible


def test_vllm_answers_are_stamped_by_the_client(codec: Codec) -> None:
    engine = offline(VLLMEngine)
    engine.ledger.set(6)
    policy = EndpointPolicy(ENDPOINT, codec, engine=engine, seed=0)
    generation, seen = answered(policy, P.VLLM_COMPLETION)
    assert generation.ids == [7, 9] and generation.logprobs == [-0.5, -1.25]
    assert generation.version == 6  # vLLM reports none: the stamp at send time
    assert seen["in_flight"] == {6: 1} and not engine.ledger.in_flight  # counted while in flight only
    assert engine.ledger.reported == 0 and engine.ledger.mismatches == 0


def test_a_push_during_a_kept_request_is_recorded_as_old_kv(codec: Codec) -> None:
    keep = offline(VLLMEngine)  # pause mode keep: frozen requests continue over their old KV
    generation, _ = answered(EndpointPolicy(ENDPOINT, codec, engine=keep, seed=0), P.VLLM_COMPLETION, 1)
    assert generation.old_kv and generation.version == 0
    wait = VLLMEngine("http://engine", "student", pause_mode="wait", transport=keep.http._transport)
    generation, _ = answered(EndpointPolicy(ENDPOINT, codec, engine=wait, seed=0), P.VLLM_COMPLETION, 1)
    assert not generation.old_kv  # wait: the request finished on the old weights before the push
    generation, _ = answered(EndpointPolicy(ENDPOINT, codec, engine=keep, seed=0), P.VLLM_COMPLETION)
    assert not generation.old_kv  # no push while it ran


def test_sglang_reports_are_checked_against_the_stamp(codec: Codec) -> None:
    engine = offline(SGLangEngine)
    policy = EndpointPolicy(ENDPOINT, codec, engine=engine, seed=0)
    engine.ledger.set(3)
    generation, _ = answered(policy, P.SGLANG_COMPLETION)  # the first span says "3"
    assert generation.version == 3 and engine.ledger.mismatches == 0 and engine.ledger.reported == 1
    assert generation.finish == "stop" and generation.stop == "</answer>"  # SGLang's matched_stop
    engine.ledger.set(2)
    generation, _ = answered(policy, P.SGLANG_COMPLETION)
    assert generation.version == 3 and engine.ledger.mismatches == 1  # counted; SGLang's report wins
    other = P.SGLANG_COMPLETION | {"metadata": {"weight_versions": [{"version": "x", "start": 0, "end": 1}]}}
    generation, _ = answered(policy, other)
    assert generation.version == 2  # a version this client never pushed: the stamp


def test_requests_sent_during_a_push_are_stamped_with_its_version(codec: Codec, tmp_path: Path) -> None:
    """A request sent once the engine is paused for a push waits for the new weights: it is stamped
    (and salted) with the pushed version, with no old KV; should the push fail, it ran on the old
    weights and its version says so. One sent before the pause keeps the old stamp (conservative)."""
    keep = offline(VLLMEngine)
    policy = EndpointPolicy(ENDPOINT, codec, engine=keep, seed=0)
    keep.ledger.begin(1)  # /pause returned, the push of version 1 under way
    generation, seen = answered(policy, P.VLLM_COMPLETION, push_to=1)  # the push lands while it waits
    assert seen["in_flight"] == {1: 1} and (generation.version, generation.old_kv) == (1, False)

    keep.ledger.begin(2)

    async def failed_push(data: bytes, prompt_len: int, max_new: int) -> dict[str, Any]:
        body = orjson.loads(data)
        assert body["cache_salt"] == keep.cache_salt(2)  # no prefix block of version 1 reused
        keep.ledger.abandon()  # the load failed: the engine resumes on version 1
        return P.VLLM_COMPLETION

    policy._post = failed_push  # type: ignore[method-assign,assignment]
    generation = asyncio.run(policy.generate([1, 2, 3], 8, Sampling(1.0)))
    assert (generation.version, generation.old_kv) == (1, False) and keep.ledger.current == 1

    # through the adapter: a request sent while reload_weights runs is stamped with the pushed version
    stamps: list[int] = []

    def engine(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/collective_rpc":
            stamps.append(pushing.ledger.stamp())
        if request.url.path == "/pause":
            stamps.append(pushing.ledger.stamp())  # sent before the pause returned: the old version
        return httpx.Response(200, json={"success": True})

    pushing = VLLMEngine("http://engine", "student", transport=httpx.MockTransport(engine))
    (tmp_path / "v3").mkdir()
    pushing.push_weights(tmp_path / "v3", 3)
    assert stamps == [0, 3] and pushing.ledger.pending is None

    # SGLang: the same, and its spans agree (the request waited in its tokenizer manager)
    sgl = offline(SGLangEngine)
    sgl.ledger.begin(4)
    spans = {"metadata": {"weight_versions": [{"version": "4", "start": 0, "end": 1}]}}
    policy = EndpointPolicy(ENDPOINT, codec, engine=sgl, seed=0)
    generation, _ = answered(policy, P.SGLANG_COMPLETION | spans, 4)
    assert generation.version == 4 and sgl.ledger.mismatches == 0


def test_a_context_overflow_names_max_model_len(serve: ServeProcess, codec: Codec) -> None:
    endpoint = EndpointConfig(name="coa", base_url=serve.url, model="student", max_retries=0, timeout_s=60)
    policy = EndpointPolicy(endpoint, codec, seed=0)

    async def run() -> None:
        await policy.start()
        try:
            await policy.generate([1, 2, 3], 10**6, Sampling(1.0))
        finally:
            await policy.stop()

    with pytest.raises(ContextOverflow) as failed:
        asyncio.run(run())
    assert "max_model_len" in str(failed.value) and "does not speak" not in str(failed.value)
    assert failed.value.exit_code == 2


def test_version_directories_outlive_their_requests(tmp_path: Path) -> None:
    from coa.rl.server import WeightSync

    engine = offline(VLLMEngine)
    sync = WeightSync(ENDPOINT, tmp_path, engine=engine)
    for v in (1, 2, 3, 4):
        (tmp_path / f"v{v:06d}").mkdir()
    engine.ledger.set(1)
    held = engine.ledger.stamp()  # a request sent under version 1 is still in flight
    engine.ledger.set(4)
    sync.prune(keep_from=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000001", "v000002", "v000003", "v000004"]
    engine.ledger.release(held)
    sync.prune(keep_from=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000003", "v000004"]
    ledger = WeightLedger()
    assert ledger.unused_below(10)


def test_the_worker_extension_loads_a_directory_in_place(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from coa.serve.weights import assign_weights

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model)).eval()
    changed = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(0.25)
    changed.save_pretrained(tmp_path / "v1")

    class Runner:  # what vLLM's worker holds: a model with load_weights(weights=iterable)
        def __init__(self) -> None:
            self.model = self

        def load_weights(self, weights: Any) -> None:
            assign_weights(model, dict(weights))

    worker = WeightLoader()
    worker.model_runner = Runner()
    assert worker.coa_extension_ready() == "ok"
    assert worker.coa_load_weights(str(tmp_path / "v1")) > 0
    name, param = next(iter(changed.named_parameters()))
    assert torch.equal(dict(model.named_parameters())[name], param)
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        worker.coa_load_weights(str(tmp_path))
