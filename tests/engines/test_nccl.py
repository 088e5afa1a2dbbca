"""``rl.rollout.server.transport: nccl``: full weights to vLLM over NCCL through TRL 1.16's own
weight-transfer client (``trl.experimental.async_grpo.weight_transfer.WeightTransferClient``).

What a CPU can check: the one-line error where vLLM is not importable beside the trainer (here), and
every HTTP request TRL's client and our adapter send for a push, held to the transcribed vLLM route
fixtures, in order, with the NCCL side replaced by a recorder (no GPU, no vLLM). Whether a real vLLM
receives the broadcast is not proven here (docs/how-to/rl-async.md says so).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from coa.engines import EngineError, open_engine
from coa.engines.vllm import VLLMEngine
from tests.engines import protocols as P
from tests.engines.test_conformance import Engine
from tests.rl.conftest import tiny_model  # noqa: F401 (fixture)


def test_nccl_without_vllm_beside_the_trainer_is_one_line_with_the_fix() -> None:
    engine = Engine(P.VLLM_ROUTES, P.VLLM_ANSWERS)
    client = VLLMEngine("http://vllm:8000", "student", weights="nccl", transport=httpx.MockTransport(engine))
    with pytest.raises(EngineError) as refused:
        client.check()
    message = str(refused.value)
    assert "\n" not in message and "vllm==0.31.0" in message and "transport: worker_extension" in message
    assert engine.calls == []  # refused before any request
    with pytest.raises(EngineError, match="transport: nccl is vLLM's"):
        open_engine("coa", "http://coa:8000", "student", weights="nccl")


class Bridge(BaseHTTPRequestHandler):
    """A real HTTP server (TRL's client speaks ``requests``) in front of the fixture ``Engine``."""

    engine: Engine
    errors: list[str]

    def handle_one(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        content = self.rfile.read(length) if length else b""
        if self.path.startswith("/finish_weight_update") and not content:
            content = b"{}"  # vLLM's route embeds an optional weight_version: no body reads as {}
        request = httpx.Request(self.command, f"http://vllm{self.path}", content=content)
        try:
            response = self.engine(request)
        except Exception as e:  # noqa: BLE001 - a body outside the fixture: the test fails on it
            self.errors.append(f"{self.command} {self.path}: {e}")
            response = httpx.Response(500, text=str(e))
        self.send_response(response.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)

    do_GET = do_POST = handle_one

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def vllm_server() -> Iterator[tuple[str, Engine, list[str]]]:
    engine = Engine(P.VLLM_ROUTES | P.VLLM_NCCL_ROUTES, P.VLLM_ANSWERS | P.VLLM_NCCL_ANSWERS)
    errors: list[str] = []
    handler = type("Handler", (Bridge,), {"engine": engine, "errors": errors})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", engine, errors
    finally:
        server.shutdown()
        server.server_close()


def test_a_push_through_trls_client_sends_vllms_routes_and_bodies(
    vllm_server: tuple[str, Engine, list[str]],
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import trl.experimental.async_grpo.async_grpo_trainer  # noqa: F401 (imported before the patches)
    import trl.experimental.async_grpo.weight_transfer as wt
    from transformers import AutoModelForCausalLM

    import coa.engines.vllm as vllm_adapter
    from coa.llm.config import EndpointConfig
    from coa.rl.server import WeightSync

    root, engine, errors = vllm_server
    broadcast: list[tuple[str, Any]] = []
    groups: list[dict[str, Any]] = []

    def trainer_init(info: dict[str, Any]) -> Any:
        groups.append(info)
        return SimpleNamespace(group=SimpleNamespace(store=object(), socket=object()))

    def producer(iterator: Any, group: Any, src: int, post_iter_func: Any) -> None:
        broadcast.extend((name, post_iter_func((name, t))) for name, t in iterator)

    # the NCCL side (vLLM's PyNccl, absent here) replaced by recorders; the HTTP side is TRL's own
    monkeypatch.setattr(vllm_adapter, "require_vllm", lambda: None)
    monkeypatch.setattr(wt, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(wt, "_HAS_STATEFUL_TRAINER_ENGINE", True)
    for name, value in {
        "open_trainer_endpoint": trainer_init,
        "packed_nccl_broadcast_producer": producer,
        "get_ip": lambda: "10.0.0.7",
        "get_open_port": lambda: 29555,
    }.items():
        monkeypatch.setattr(wt, name, value, raising=False)

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    client = open_engine("vllm", root, "student", weights="nccl")
    assert isinstance(client, VLLMEngine) and client.streams_weights
    sync = WeightSync(
        EndpointConfig(name="v", base_url=f"{root}/v1", model="student"), tmp_path, engine=client
    )
    sync.push(model, 3)  # the RL stage's push: tensors, no folder written
    sync.push(model, 4)
    sync.clean()
    assert sync.pushes == 2 and not list(tmp_path.iterdir())
    assert errors == []
    paths = [f"{method} {path}" for method, path, _, _ in engine.calls]
    once = ["GET /health", "GET /server_info", "GET /get_world_size", "POST /init_weight_transfer_engine"]
    push = ["POST /pause", "POST /start_weight_update", "POST /update_weights", "POST /finish_weight_update"]
    push += ["POST /update_weight_version", "POST /reset_prefix_cache", "POST /resume"]
    assert paths == once + push + push  # the group is joined once, then each push
    bodies = {path: body for _, path, _, body in engine.calls}
    init = P.NCCLInitInfo.model_validate(bodies["/init_weight_transfer_engine"]["init_info"])
    assert (init.master_address, init.master_port, init.rank_offset, init.world_size) == (
        "10.0.0.7",
        29555,
        1,
        2,
    )
    assert groups == [
        bodies["/init_weight_transfer_engine"]["init_info"]
    ]  # the trainer joined the same group
    info = P.NCCLUpdateInfo.model_validate(bodies["/update_weights"]["update_info"])
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert info.names == [n for n, _ in params] and info.shapes == [list(p.shape) for _, p in params]
    assert set(info.dtype_names) == {"float32"}
    assert [n for n, _ in broadcast] == info.names * 2  # each push broadcast every tensor the manifest names
    assert bodies["/start_weight_update"] == {"is_checkpoint_format": True}
    assert bodies["/update_weight_version"] == {"new_version": "4"} and client.ledger.current == 4
    assert engine.calls[4][2] == {"mode": "keep", "clear_cache": "false"}
    assert json.dumps(bodies["/update_weights"])  # JSON, as sent
