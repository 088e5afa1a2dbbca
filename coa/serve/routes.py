"""The HTTP face of :class:`~coa.serve.app.ModelServer`: vLLM's OpenAI-compatible routes, and the RL
admin routes of :mod:`coa.serve.admin` (vLLM's dev routes, or SGLang's under ``--protocol sglang``).

Apart from :mod:`coa.serve.app` so that the admin routes, which drive a server, and the server itself
import one way only (app <- admin <- routes).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from coa.serve.admin import add_sglang_routes, add_vllm_dev_routes
from coa.serve.app import AdapterRequest, CompletionRequest, ModelServer, ServeError


def create_app(server: ModelServer, *, dev_mode: bool | None = None) -> Any:
    """The FastAPI application over ``server`` (the batcher starts and stops with the app).

    ``dev_mode`` (default: ``VLLM_SERVER_DEV_MODE=1`` in the environment, as vLLM reads it) adds
    vLLM's RL routes under ``--protocol vllm``; SGLang's admin routes need no flag.
    """
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        server.batcher.start()
        try:
            yield
        finally:
            server.batcher.stop()

    app = FastAPI(title="coa.serve", lifespan=lifespan)

    def error(status: int, message: str, kind: str) -> JSONResponse:
        body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
        return JSONResponse(body, status_code=status)

    @app.exception_handler(ServeError)
    async def serve_error(_: Request, e: ServeError) -> JSONResponse:
        return error(e.status, str(e), e.kind)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:])
        return error(400, f"{where}: {first.get('msg', 'invalid request')}", "BadRequestError")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> JSONResponse:
        return JSONResponse(await server.complete(body))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return server.models()

    if server.protocol == "vllm":  # SGLang's are /load_lora_adapter and /unload_lora_adapter (admin)

        @app.post("/v1/load_lora_adapter")
        async def load_lora_adapter(body: AdapterRequest) -> PlainTextResponse:
            return PlainTextResponse(await server.load_adapter(body))

        @app.post("/v1/unload_lora_adapter")
        async def unload_lora_adapter(body: AdapterRequest) -> PlainTextResponse:
            return PlainTextResponse(await server.unload_adapter(body))

    @app.get("/health")
    async def health() -> JSONResponse:
        if server.batcher.failure is not None:
            return error(503, f"the batcher failed: {server.batcher.failure!r}", "ServiceUnavailableError")
        return JSONResponse({"status": "ok"})

    if server.protocol == "sglang":
        add_sglang_routes(app, server)
    elif dev_mode if dev_mode is not None else os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
        add_vllm_dev_routes(app, server)
    return app
