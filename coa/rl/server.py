"""The ``server`` rollout backend of RL: which completions server, and the trainer's weights pushed to it.

:func:`server_endpoint` is the server of ``rl.rollout.server``, or of the environment
(``$COA_RL_SERVER_URL``, ``$COA_RL_SERVER_MODEL``) when that is null, as the teacher's endpoints
take theirs. :class:`WeightSync` pushes the trainer's full weights to it before a generation batch:
every tensor written (atomically) to ``v<version>.safetensors`` in the sync folder, then the
protocol TRL 1.16's async client speaks to vLLM (``POST /pause``, the update, ``POST /resume``),
with the update as ``coa.serve``'s ``POST /update_weights {path, version}``: the server reads the
file, so both must reach the same filesystem. The version is the trainer's global optimizer step,
so every completion the server answers afterwards names the weights it was sampled with
(``weight_version``), which the rollout rows record as ``policy_version``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from coa.llm.config import EndpointConfig
from coa.rl.config import SERVER_MODEL_ENV, SERVER_URL_ENV, RLParams
from coa.rollout.policies.endpoint import EndpointError


def server_endpoint(params: RLParams) -> EndpointConfig:
    """The completions server of ``rl.rollout`` (config, else the environment); exit 3 when neither."""
    if params.rollout.server is not None:
        endpoint = params.rollout.server
    else:
        model = os.environ.get(SERVER_MODEL_ENV, "").strip()
        if not os.environ.get(SERVER_URL_ENV, "").strip() or not model:
            raise EndpointError(
                f"rl.rollout.backend: server needs a server: set rl.rollout.server (base_url, model) or "
                f"the environment variables {SERVER_URL_ENV} (e.g. http://127.0.0.1:8000/v1) and "
                f"{SERVER_MODEL_ENV} (the served model name)"
            )
        endpoint = EndpointConfig(name="rl-server", base_url_env=SERVER_URL_ENV, model=model)
    # one request per generation in flight; the rollout engine bounds them, not the endpoint
    concurrency = max(
        endpoint.max_concurrency, 2 * params.episodes_per_generation * (params.max_staleness + 1)
    )
    return endpoint.model_copy(update={"max_concurrency": concurrency, "max_retries": 0})


def admin_root(endpoint: EndpointConfig) -> str:
    """The server's root (its admin routes: ``/pause``, ``/update_weights``), the base URL without ``/v1``."""
    url = endpoint.resolved_base_url()
    return url[: -len("/v1")] if url.endswith("/v1") else url


class WeightSync:
    """Pushes the trainer's full weights to a ``coa.serve``-protocol server, versioned by optimizer step."""

    def __init__(
        self, endpoint: EndpointConfig, folder: Path, pause_mode: str = "keep", keep_files: int = 2
    ) -> None:
        self.endpoint = endpoint
        self.root = admin_root(endpoint)
        self.folder = folder
        self.pause_mode = pause_mode
        self.keep_files = keep_files
        self.version: int | None = None
        self.pushes = 0
        self.seconds = 0.0

    def _post(self, path: str, **kwargs: Any) -> Any:
        import httpx

        url = f"{self.root}{path}"
        try:
            response = httpx.post(url, timeout=self.endpoint.timeout_s, **kwargs)
        except httpx.HTTPError as e:
            raise EndpointError(f"rl server {url} unreachable: {type(e).__name__}: {e}") from e
        if response.status_code == 404:
            raise EndpointError(
                f"rl server {url}: no such route (404): full weight sync needs coa.serve's "
                "/pause, /update_weights and /resume (python -m coa.serve)"
            )
        if response.status_code != 200:
            raise EndpointError(f"rl server {url} answered {response.status_code}: {response.text[:300]}")
        return response.json()

    def check(self) -> None:
        """The server answers and serves the configured model (exit 3 with the fix otherwise)."""
        import httpx

        url = f"{self.endpoint.resolved_base_url()}/models"
        try:
            response = httpx.get(url, timeout=self.endpoint.timeout_s)
        except httpx.HTTPError as e:
            raise EndpointError(
                f"rl server {url} unreachable ({type(e).__name__}): start it (python -m coa.serve --model "
                f"<the base model> --served-model-name {self.endpoint.model}) or fix rl.rollout.server"
            ) from e
        served = [m.get("id") for m in response.json().get("data", [])] if response.status_code == 200 else []
        if self.endpoint.model not in served:
            raise EndpointError(
                f"rl server {url} does not serve {self.endpoint.model!r} (it serves {served}): set "
                "rl.rollout.server.model to the served model name"
            )

    def push(self, model: Any, version: int) -> None:
        """Write ``model``'s weights and make the server load them as ``version`` (pause, update, resume)."""
        from safetensors.torch import save_model

        start = time.perf_counter()
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"v{version:06d}.safetensors"
        tmp = path.with_name(f".{path.name}.tmp")
        save_model(model, str(tmp))  # tied tensors once; the server re-ties them
        tmp.replace(path)
        self._post("/pause", params={"mode": self.pause_mode})
        try:
            self._post("/update_weights", json={"path": str(path.resolve()), "version": version})
        finally:
            self._post("/resume")
        self.version = version
        self.pushes += 1
        for old in sorted(self.folder.glob("v*.safetensors"))[: -self.keep_files]:
            old.unlink(missing_ok=True)
        self.seconds += time.perf_counter() - start

    def clean(self) -> None:
        """Remove the weight files this run wrote (each was loaded by the server before its push returned)."""
        for path in self.folder.glob("v*.safetensors"):
            path.unlink(missing_ok=True)
