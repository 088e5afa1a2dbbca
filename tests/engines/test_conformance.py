"""Every request an engine adapter sends, held to the engine's own request fields (transcribed in
:mod:`tests.engines.protocols` with file:line citations), every answer it parses a recorded shape.

The adapters talk to an ``httpx.MockTransport`` that plays the engine: it refuses a route the engine
does not have (404, as the engine would), validates the query and body against the transcribed
models (extra fields forbidden) and answers the recorded body. What the engines do with the
requests is proven against coa.serve (tests/serve, tests/rl); no real vLLM or SGLang runs here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from coa.engines import ContextOverflow, EngineError, detect, is_context_overflow, open_engine
from coa.engines.sglang import SGLangEngine
from coa.engines.vllm import VLLMEngine
from tests.engines import protocols as P

Routes = dict[tuple[str, str], tuple[type[BaseModel] | None, type[BaseModel] | None]]


class StartWeightUpdate(P.Strict):
    """vLLM 0.31 reads no body here (rlhf/api_router.py:174-177); TRL 1.16's async client sends
    ``is_checkpoint_format`` (trl/experimental/async_grpo/vllm_client.py, start_weight_update)."""

    is_checkpoint_format: bool = False


class Engine:
    """An engine's routes as a mock transport: validates, records, answers."""

    def __init__(
        self,
        routes: Routes,
        answers: dict[tuple[str, str], Any],
        keys: tuple[str | None, str | None] = (None, None),
        **override: Any,
    ) -> None:
        self.routes, self.answers = routes, answers | override
        self.keys = keys
        """SGLang's ``--api-key`` and ``--admin-api-key`` (:func:`protocols.sglang_auth`)."""
        self.calls: list[tuple[str, str, dict[str, str], Any]] = []
        self.refused: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path)
        if P.sglang_auth(request.url.path, request.headers.get("Authorization"), *self.keys) == 401:
            self.refused.append(request.url.path)
            return httpx.Response(401, json=P.SGLANG_UNAUTHORIZED)
        if key not in self.routes:
            return httpx.Response(404, json={"detail": "Not Found"})
        query_model, body_model = self.routes[key]
        params = dict(request.url.params)
        if query_model is not None:
            query_model.model_validate(params)
        else:
            assert not params, f"{key} reads no query, got {params}"
        body = json.loads(request.content) if request.content else None
        if key == ("POST", "/start_weight_update"):
            body_model = StartWeightUpdate
        if body_model is not None:
            body_model.model_validate(body)
            # SGLang would drop an undeclared field silently: refuse it here
            undeclared = set(body or {}) - set(body_model.model_fields)
            assert not undeclared, f"{key}: {undeclared} would be dropped"
        else:
            assert body in (None, {}), f"{key} reads no body, got {body}"
        self.calls.append((request.method, request.url.path, params, body))
        answer = self.answers[key]
        if isinstance(answer, httpx.Response):
            return answer
        if isinstance(answer, str):
            return httpx.Response(200, text=answer)
        return httpx.Response(200, json=answer)

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.calls]


def vllm(engine: Engine, **kw: Any) -> VLLMEngine:
    return VLLMEngine("http://vllm:8000", "student", transport=httpx.MockTransport(engine), **kw)


def model_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def test_vllm_full_weights_through_its_own_reload_weights(tmp_path: Path) -> None:
    engine = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    client = vllm(engine)
    client.check()
    assert client.logprobs_processed is True  # read from /server_info's model_config
    engine.calls.clear()
    client.push_weights(model_folder(tmp_path, "v000003"), 3)
    assert engine.paths() == [
        "/pause", "/collective_rpc", "/update_weight_version", "/reset_prefix_cache", "/resume"
    ]  # fmt: skip
    assert engine.calls[0][2] == {"mode": "keep", "clear_cache": "false"}  # keep the running requests' KV
    assert engine.calls[1][3] == {
        "method": "reload_weights", "args": [],
        "kwargs": {"weights_path": str((tmp_path / "v000003").resolve())}, "timeout": None,
    }  # fmt: skip
    assert engine.calls[2][3] == {"new_version": "3"}  # vLLM's versions are strings
    assert client.ledger.current == 3 and client.request_model() == "student"
    assert client.keeps_old_kv() and client.prefix_resets_refused == 0

    old = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS | {("GET", "/version"): {"version": "0.30.2"}})
    with pytest.raises(EngineError) as refused:
        vllm(old).check()
    assert "vLLM 0.30.2" in one_line(refused.value) and "transport: worker_extension" in str(refused.value)
    vllm(old).check(full_weights=False)  # LoRA needs neither reload_weights nor the extension


def test_vllm_full_weights_through_the_worker_extension(tmp_path: Path) -> None:
    engine = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    client = vllm(engine, weights="worker_extension")
    client.check()
    engine.calls.clear()
    client.push_weights(model_folder(tmp_path, "v000003"), 3)
    assert engine.paths() == [
        "/pause", "/collective_rpc", "/update_weight_version", "/reset_prefix_cache", "/resume"
    ]  # fmt: skip
    assert engine.calls[1][3] == {
        "method": "coa_load_weights", "args": [str((tmp_path / "v000003").resolve())], "kwargs": {},
        "timeout": None,
    }  # fmt: skip


def test_vllm_reset_refused_while_kept_requests_hold_blocks(tmp_path: Path) -> None:
    """``keep`` with ``clear_cache=false`` leaves the running requests' blocks in use: vLLM answers the
    reset with ``{"success": false}``; the push still lands, the refusal is counted."""
    engine = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS | {("POST", "/reset_prefix_cache"): P.VLLM_RESET_REFUSED})
    client = vllm(engine)
    client.push_weights(model_folder(tmp_path, "v000001"), 1)
    assert client.prefix_resets_refused == 1 and client.ledger.current == 1
    assert engine.paths()[-1] == "/resume"
    assert client.cache_salt(1) != client.cache_salt(2)  # requests of two versions share no prefix blocks


def test_coa_disk_transport_speaks_vllms_update_routes(tmp_path: Path) -> None:
    engine = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    client = vllm(engine, kind="coa", weights="disk", pause_mode="wait")
    client.push_weights(model_folder(tmp_path, "v000001"), 1)
    assert engine.paths() == [
        "/pause", "/start_weight_update", "/update_weights", "/finish_weight_update",
        "/reset_prefix_cache", "/resume",
    ]  # fmt: skip
    assert engine.calls[2][3] == {"update_info": {"path": str((tmp_path / "v000001").resolve())}}
    assert engine.calls[3][3] == {"weight_version": "1"}


def test_vllm_lora_after_a_restart_and_after_a_killed_run() -> None:
    """An adapter the engine does not hold (a restarted vLLM) unloads as no error; a 404 for the route
    itself still names the fix; the adapters a killed run left are found in /v1/models."""
    gone = Engine(
        P.VLLM_ROUTES,
        P.VLLM_ANSWERS
        | {("POST", "/v1/unload_lora_adapter"): httpx.Response(404, json=P.VLLM_UNKNOWN_ADAPTER)},
    )
    client = vllm(gone)
    client.adapters = {1, 2}
    client.retire_adapter(1)
    client.retire_adapters()
    assert client.adapters == set()
    no_route = Engine(
        P.VLLM_ROUTES,
        P.VLLM_ANSWERS | {("POST", "/v1/unload_lora_adapter"): httpx.Response(404, json=P.VLLM_NO_ROUTE)},
    )
    with pytest.raises(EngineError) as failed:
        vllm(no_route).unload("student-v1")
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1" in one_line(failed.value)

    cards = [{"id": "student", "owned_by": "vllm"}, {"id": "student-v4", "parent": "student"}]
    cards += [{"id": "student-v5", "parent": "student"}, {"id": "other-v9", "parent": "other"}]
    left = Engine(
        P.VLLM_ROUTES,
        P.VLLM_ANSWERS
        | {("GET", "/v1/models"): {"data": cards}, ("GET", "/weight_info"): {"weight_version": "5"}},
    )
    killed = vllm(left)
    killed.check(full_weights=False)
    assert killed.held_versions() == {4, 5} and killed.ledger.current == 5


def test_vllm_lora_versions_are_new_adapter_names(tmp_path: Path) -> None:
    engine = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    client = vllm(engine)
    for version in (4, 5):
        client.push_adapter(model_folder(tmp_path, f"a{version}"), version)
    client.retire_adapter(4)
    client.retire_adapter(5)  # the served one is never unloaded
    loads = [body for _, path, _, body in engine.calls if path == "/v1/load_lora_adapter"]
    assert [b["lora_name"] for b in loads] == ["student-v4", "student-v5"]
    assert all(b["load_inplace"] is False for b in loads)
    unloads = [body for _, path, _, body in engine.calls if path == "/v1/unload_lora_adapter"]
    assert unloads == [{"lora_name": "student-v4"}]
    assert client.request_model() == "student-v5" and client.ledger.current == 5


def test_vllm_lora_requests_name_their_versions_adapter(tmp_path: Path) -> None:
    """A request stamped with version V names ``<model>-vV`` while V is loaded; a name a killed run left
    loaded is replaced (vLLM's 400 "has already been loaded", serving_models.py), and the end of a run
    unloads every adapter it loaded."""
    engine = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    loads = {"n": 0}

    def transport(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/load_lora_adapter" and loads["n"] == 0:
            loads["n"] += 1
            name = json.loads(request.content)["lora_name"]
            message = f"The lora adapter '{name}' has already been loaded."
            return httpx.Response(400, json={"error": {"message": message, "type": "BadRequestError"}})
        return engine(request)

    client = VLLMEngine("http://vllm:8000", "student", transport=httpx.MockTransport(transport))
    assert client.request_model(0) == "student"  # nothing pushed: the base model
    client.push_adapter(model_folder(tmp_path, "a2"), 2)
    assert engine.paths() == [
        "/pause", "/v1/unload_lora_adapter", "/v1/load_lora_adapter", "/reset_prefix_cache", "/resume"
    ]  # fmt: skip
    client.push_adapter(model_folder(tmp_path, "a3"), 3)
    assert (client.request_model(2), client.request_model(3)) == ("student-v2", "student-v3")
    assert not client.keeps_old_kv()  # a request keeps its adapter to its end
    engine.calls.clear()
    client.retire_adapters()
    assert [body["lora_name"] for _, _, _, body in engine.calls] == ["student-v2", "student-v3"]
    assert client.request_model(3) == "student"


def test_sglang_serves_a_pushed_folder_under_its_path() -> None:
    """After an update SGLang lists the folder, not --served-model-name: a second run's check passes;
    a server serving another model by name, never updated, is still refused."""
    renamed = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS | P.SGLANG_RENAMED)
    client = SGLangEngine("http://sgl:30000", "student", transport=httpx.MockTransport(renamed))
    client.check()
    assert client.ledger.current == 2 and client.request_model() == "student"
    other = Engine(
        P.SGLANG_ROUTES,
        P.SGLANG_ANSWERS | {("GET", "/v1/models"): {"data": [{"id": "teacher", "owned_by": "sglang"}]}},
    )
    with pytest.raises(EngineError) as refused:
        SGLangEngine("http://sgl", "student", transport=httpx.MockTransport(other)).check()
    assert "does not serve 'student'" in one_line(refused.value)


def test_sglang_old_kv_from_its_spans() -> None:
    """in_place: old KV exactly when the spans show the request ran across a push, or was queued behind
    it (first span newer than its stamp); retract never keeps it."""
    engine = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS)
    in_place = SGLangEngine("http://sgl", "s", pause_mode="in_place", transport=httpx.MockTransport(engine))
    in_place.ledger.set(4)

    def spans(*versions: str) -> dict[str, Any]:
        return {
            "metadata": {
                "weight_versions": [{"version": v, "start": i, "end": i + 1} for i, v in enumerate(versions)]
            }
        }

    assert in_place.old_kv(3, spans("3", "4"))  # ran across the push
    assert in_place.old_kv(3, spans("4"))  # queued behind it, the old version's cache salt
    assert not in_place.old_kv(3, spans("3"))  # finished before the push landed
    assert not in_place.old_kv(4, spans("4"))
    retract = SGLangEngine("http://sgl", "s", transport=httpx.MockTransport(engine))
    assert not retract.old_kv(3, spans("3", "4"))


def test_sglang_push_and_reported_versions(tmp_path: Path) -> None:
    engine = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS)
    client = SGLangEngine("http://sgl:30000", "student", transport=httpx.MockTransport(engine))
    client.check()
    engine.calls.clear()
    client.push_weights(model_folder(tmp_path, "v000002"), 2)
    assert engine.paths() == ["/pause_generation", "/update_weights_from_disk", "/continue_generation"]
    assert engine.calls[0][3] == {"mode": "retract"} and not client.keeps_old_kv()
    update = engine.calls[1][3]
    assert update["model_path"] == str((tmp_path / "v000002").resolve()) and update["weight_version"] == "2"
    assert update["flush_cache"] is True
    assert client.reported_version(P.SGLANG_COMPLETION) == "3"  # the first token's span
    assert client.reported_version({"metadata": {"weight_version": "7"}}) == "7"
    assert client.reported_version({"metadata": {"weight_versions": [{"version": "5"}]}}) == "5"
    in_place = SGLangEngine(
        "http://sgl", "student", pause_mode="in_place", transport=httpx.MockTransport(engine)
    )
    engine.calls.clear()
    in_place.push_weights(model_folder(tmp_path, "v000003"), 3)
    assert engine.calls[0][3] == {"mode": "in_place"} and engine.calls[1][3]["flush_cache"] is False
    assert in_place.keeps_old_kv()
    with pytest.raises(EngineError, match="hub id"):  # a file, not a model folder
        client.push_weights(tmp_path / "v000002" / "model.safetensors", 4)
    refused = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS)
    refused.answers[("POST", "/update_weights_from_disk")] = httpx.Response(
        400, json={"success": False, "message": "bad shapes", "num_paused_requests": 0}
    )
    bad = SGLangEngine("http://sgl", "student", transport=httpx.MockTransport(refused))
    with pytest.raises(EngineError, match="bad shapes"):
        bad.push_weights(tmp_path / "v000003", 5)
    assert refused.paths()[-1] == "/continue_generation" and bad.ledger.current == 0  # resumed, not moved


def sglang(engine: Engine, **kw: Any) -> SGLangEngine:
    return SGLangEngine("http://sgl:30000", "student", transport=httpx.MockTransport(engine), **kw)


@pytest.mark.parametrize("keys", [("api", "admin"), ("api", None), (None, "admin")])
def test_sglang_routes_get_the_key_each_takes(keys: tuple[str | None, str | None], tmp_path: Path) -> None:
    """With both keys set, SGLang's admin routes take only --admin-api-key and the others only
    --api-key (``auth.py`` ``decide_request_auth``): the client sends each route its own; one key
    sent everywhere, the old behaviour, is refused and the error names the setting."""
    api, admin = keys
    engine = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS, keys=keys)
    client = sglang(engine, api_key=api, admin_api_key=admin)
    client.check()
    client.push_weights(model_folder(tmp_path, "v000001"), 1)
    client.push_adapter(tmp_path / "v000001", 2)
    client.retire_adapters()
    assert not engine.refused and engine.paths()[-1] == "/unload_lora_adapter"

    # the policy's completions carry api_key_env's key (EndpointPolicy.start): a NORMAL route
    assert P.sglang_auth("/v1/completions", f"Bearer {api}" if api else None, api, admin) == 200
    if api and admin:  # the mock refuses the other key on each kind of route, as SGLang does
        assert P.sglang_auth("/v1/completions", "Bearer admin", api, admin) == 401
        assert P.sglang_auth("/pause_generation", "Bearer api", api, admin) == 401
    if api and admin:  # one key for every route, the old behaviour: refused where it is not the route's
        with pytest.raises(EngineError) as refused:
            sglang(engine, api_key=api).push_weights(tmp_path / "v000001", 3)
        assert "rl.rollout.server.api_key_env" in one_line(refused.value) and "401" in str(refused.value)
        assert engine.refused == ["/pause_generation"]
        with pytest.raises(EngineError) as refused:
            sglang(engine, api_key=admin, admin_api_key=admin).check()  # the admin key on /v1/models
        assert "SGLang's --api-key" in one_line(refused.value)
        with pytest.raises(EngineError) as refused:
            sglang(engine, api_key=api, admin_api_key=api).push_adapter(tmp_path / "v000001", 3)
        assert "admin_api_key_env" in one_line(refused.value) and "--admin-api-key" in str(refused.value)
    with pytest.raises(EngineError, match="unset admin_api_key_env"):
        open_engine("vllm", "http://v", "student", admin_api_key="admin")  # vLLM has one key


def test_sglang_lora_pushes_adapters_by_name(tmp_path: Path) -> None:
    """SGLang's /load_lora_adapter under a new name per version, no pause (running requests keep the
    adapter they named); requests name ``<model>:<adapter>``; a name a killed run left loaded is
    unloaded and loaded again; an adapter SGLang does not hold (a restart) unloads as no error."""
    engine = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS)
    client = sglang(engine)
    client.check(full_weights=False)
    assert client.request_model(0) == "student"
    for version in (4, 5):
        client.push_adapter(model_folder(tmp_path, f"a{version}"), version)
    assert engine.paths()[-2:] == ["/load_lora_adapter", "/load_lora_adapter"]  # no pause, no continue
    assert engine.calls[-1][3] == {"lora_name": "student-v5", "lora_path": str((tmp_path / "a5").resolve())}
    assert (client.request_model(4), client.request_model(5)) == ("student:student-v4", "student:student-v5")
    assert client.request_model() == "student:student-v5" and client.ledger.current == 5
    assert not client.keeps_old_kv() and client.reported_version(P.SGLANG_COMPLETION) is None
    client.retire_adapter(4)
    client.retire_adapter(5)  # the served one stays
    assert [b for _, p, _, b in engine.calls if p == "/unload_lora_adapter"] == [{"lora_name": "student-v4"}]

    left = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS)
    loads = {"n": 0}

    def leftover(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/load_lora_adapter" and loads["n"] == 0:
            loads["n"] += 1
            return httpx.Response(400, json=P.SGLANG_LORA_ALREADY_LOADED)
        if request.url.path == "/unload_lora_adapter" and loads["n"] == 1:
            loads["n"] += 1
            return left(request)
        if request.url.path == "/unload_lora_adapter":
            return httpx.Response(400, json=P.SGLANG_LORA_UNKNOWN)  # a restarted SGLang holds none
        return left(request)

    cards = [{"id": "student"}, {"id": "student-v0", "parent": "student"}, {"id": "other-v3", "parent": "x"}]
    left.answers[("GET", "/v1/models")] = {"data": cards}
    resumed = SGLangEngine("http://sgl", "student", transport=httpx.MockTransport(leftover))
    resumed.check(full_weights=False)
    assert resumed.held_versions() == {0}  # the killed run's adapter, found in /v1/models
    resumed.push_adapter(model_folder(tmp_path, "v000001"), 1)
    assert left.paths()[-2:] == ["/unload_lora_adapter", "/load_lora_adapter"]  # replaced
    resumed.retire_adapter(0)  # SGLang no longer holds it: 400 "does not exist", no error
    assert resumed.held_versions() == {1}

    disabled = Engine(P.SGLANG_ROUTES, P.SGLANG_ANSWERS)
    disabled.answers[("POST", "/load_lora_adapter")] = httpx.Response(400, json=P.SGLANG_LORA_DISABLED)
    with pytest.raises(EngineError) as failed:
        sglang(disabled).push_adapter(tmp_path / "a4", 6)
    assert "--enable-lora" in one_line(failed.value) and "--lora-target-modules" in str(failed.value)


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text
    return text


def test_missing_routes_name_the_engine_and_the_fix() -> None:
    no_dev = {k: v for k, v in P.VLLM_ROUTES.items() if k in {("GET", "/v1/models")}}
    with pytest.raises(EngineError) as failed:
        vllm(Engine(no_dev, P.VLLM_ANSWERS)).check()
    assert "vllm server has no GET /is_paused" in one_line(failed.value)
    assert "VLLM_SERVER_DEV_MODE=1" in str(failed.value) and failed.value.exit_code == 3

    no_extension = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    no_extension.answers[("POST", "/collective_rpc")] = httpx.Response(500, json={"error": "no attribute"})
    with pytest.raises(EngineError) as failed:
        vllm(no_extension, weights="worker_extension").check()
    assert "--worker-extension-cls coa.engines.worker_extension.WeightLoader" in one_line(failed.value)

    no_lora = {k: v for k, v in P.VLLM_ROUTES.items() if "lora" not in k[1]}
    with pytest.raises(EngineError) as failed:
        vllm(Engine(no_lora, P.VLLM_ANSWERS)).push_adapter(Path("/tmp"), 1)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1" in one_line(failed.value)

    other_model = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    with pytest.raises(EngineError, match="does not serve 'teacher'"):
        VLLMEngine("http://vllm", "teacher", transport=httpx.MockTransport(other_model)).check()


def test_tis_is_refused_on_raw_logprobs_away_from_temperature_1() -> None:
    raw = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    info = P.VLLM_ANSWERS[("GET", "/server_info")]
    raw.answers[("GET", "/server_info")] = info | {
        "vllm_config": {"model_config": {"logprobs_mode": "raw_logprobs"}}
    }
    client = vllm(raw)
    client.check()
    client.refuse_tis(1.0)  # raw == processed at temperature 1 (no top-k / top-p in RL sampling)
    with pytest.raises(EngineError) as failed:
        client.refuse_tis(0.7)
    assert "--logprobs-mode processed_logprobs" in one_line(failed.value)
    unknown = vllm(Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS))
    with pytest.raises(EngineError, match="unknown"):
        unknown.refuse_tis(0.7)  # never checked: not known to be processed


def test_detect_probes_each_engine() -> None:
    def transport(routes: Routes, answers: dict[tuple[str, str], Any]) -> httpx.MockTransport:
        return httpx.MockTransport(Engine(routes, answers))

    assert detect("http://s", transport=transport(P.SGLANG_ROUTES, P.SGLANG_ANSWERS)) == "sglang"
    assert detect("http://v", transport=transport(P.VLLM_ROUTES, P.VLLM_ANSWERS)) == "vllm"
    coa = P.VLLM_ANSWERS | {("GET", "/v1/models"): {"data": [{"id": "student", "owned_by": "coa"}]}}
    assert detect("http://c", transport=transport(P.VLLM_ROUTES, coa)) == "coa"
    other = P.VLLM_ANSWERS | {("GET", "/v1/models"): {"data": [{"id": "x", "owned_by": "openai"}]}}
    with pytest.raises(EngineError, match=r"rl.rollout.server.engine: vllm \| sglang \| coa"):
        detect("http://o", transport=transport(P.VLLM_ROUTES, other))
    client = open_engine("coa", "http://c", "student")
    assert isinstance(client, VLLMEngine) and client.weights_transport == "disk"


def test_context_overflow_is_recognised() -> None:
    vllm_message = "Input length (5000) exceeds model's maximum context length (4096)."
    assert is_context_overflow(400, json.dumps({"message": vllm_message}))
    assert not is_context_overflow(400, "prompt ids outside the vocabulary")
    assert issubclass(ContextOverflow, ValueError) and ContextOverflow("x").exit_code == 2
