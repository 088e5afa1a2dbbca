"""Clients of serving engines used as RL rollout servers: one interface, one adapter per engine.

:func:`open_engine` returns the adapter of ``kind`` (``vllm``, ``sglang`` or ``coa`` for ``python
-m coa.serve``), or of the engine a probe finds (:func:`detect`: SGLang answers ``/model_info``;
vLLM and coa.serve name themselves as ``owned_by`` in ``/v1/models``). Every adapter speaks its
engine's own routes and bodies (``/work``'s engine-protocols reference; the conformance tests in
``tests/engines`` hold them to transcribed request fields of the engines' source).
"""

from __future__ import annotations

from typing import Any, Literal

from coa.engines.base import (
    ContextOverflow,
    EngineClient,
    EngineError,
    EngineKind,
    UnknownName,
    WeightLedger,
    is_context_overflow,
)

__all__ = [
    "ContextOverflow",
    "EngineClient",
    "EngineError",
    "EngineKind",
    "UnknownName",
    "WeightLedger",
    "detect",
    "is_context_overflow",
    "open_engine",
]


def detect(
    root: str, *, timeout_s: float = 30.0, api_key: str | None = None, transport: Any = None
) -> EngineKind:
    """The engine at ``root``, by probing ``/model_info`` (SGLang) then ``/v1/models`` (``owned_by``)."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout_s, headers=headers, transport=transport) as http:
        try:
            info = http.get(f"{root}/model_info")
            if info.status_code == 200 and "model_path" in info.json():
                return "sglang"
            models = http.get(f"{root}/v1/models")
        except (httpx.HTTPError, ValueError) as e:
            raise EngineError(
                f"rollout server {root} unreachable ({type(e).__name__}: {e}): start it (vllm serve, "
                "python -m sglang.launch_server or python -m coa.serve: docs/how-to/rl-async.md) or fix "
                "rl.rollout.server"
            ) from e
    owners = (
        {str(m.get("owned_by")) for m in models.json().get("data", [])}
        if models.status_code == 200
        else set()
    )
    if "vllm" in owners:
        return "vllm"
    if "coa" in owners:
        return "coa"
    raise EngineError(
        f"rollout server {root} is neither vLLM, SGLang nor coa.serve (no /model_info; /v1/models owned_by "
        f"{sorted(owners)}): set rl.rollout.server.engine: vllm | sglang | coa"
    )


def open_engine(
    kind: EngineKind | Literal["auto"],
    root: str,
    model: str,
    *,
    pause_mode: Literal["abort", "wait", "keep"] = "keep",
    sglang_pause_mode: Literal["retract", "in_place"] = "retract",
    timeout_s: float = 600.0,
    api_key: str | None = None,
    admin_api_key: str | None = None,
    transport: Any = None,
    weights: Literal["auto", "reload", "worker_extension", "nccl"] = "auto",
) -> EngineClient:
    """The adapter of ``kind`` (``auto``: the one :func:`detect` finds) for the server at ``root``;
    ``weights``: how full weights travel to vLLM (auto: vLLM 0.31's own ``reload_weights``; coa.serve:
    its disk one); ``admin_api_key``: SGLang's ``--admin-api-key``, sent to its admin routes only
    (``api_key`` to the others)."""
    from coa.engines.sglang import SGLangEngine
    from coa.engines.vllm import VLLMEngine, WeightsTransport

    if kind == "auto":
        kind = detect(root, timeout_s=min(timeout_s, 30.0), api_key=api_key, transport=transport)
    common: dict[str, Any] = {"timeout_s": timeout_s, "api_key": api_key, "transport": transport}
    if weights == "nccl" and kind != "vllm":
        raise EngineError(
            f"rl.rollout.server.transport: nccl is vLLM's weight transfer, but the server is {kind}: "
            'set transport: auto, or serve with vLLM (--weight-transfer-config \'{"backend": "nccl"}\')'
        )
    if kind == "sglang":
        return SGLangEngine(root, model, pause_mode=sglang_pause_mode, admin_api_key=admin_api_key, **common)
    if admin_api_key:
        raise EngineError(
            f"rl.rollout.server.admin_api_key_env names SGLang's --admin-api-key, but the server is {kind} "
            "(one key, api_key_env, for every route): unset admin_api_key_env"
        )
    chosen: WeightsTransport = "disk" if kind == "coa" else ("reload" if weights == "auto" else weights)
    return VLLMEngine(root, model, kind=kind, pause_mode=pause_mode, weights=chosen, **common)
