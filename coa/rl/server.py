"""The ``server`` rollout backend of RL: which serving engine, and the trainer's weights pushed to it.

:func:`server_endpoint` is the server of ``rl.rollout.server``, or of the environment
(``$COA_RL_SERVER_URL``, ``$COA_RL_SERVER_MODEL``) when that is null, as the teacher's endpoints
take theirs. :class:`WeightSync` pushes the trainer's full weights to it before a generation batch:
``save_pretrained`` into one directory per version (``v<version>/``, written under a temporary
name and renamed), then the engine's own routes through its adapter (:mod:`coa.engines`: vLLM's
own ``reload_weights`` driven by ``/collective_rpc``, SGLang's ``/update_weights_from_disk``, or
coa.serve's ``update_info`` disk transport), so both must reach the same filesystem. The version is
the trainer's global optimizer step; every request the policy sends afterwards is stamped with it
by the client (no engine reports it reliably), which the rollout rows record as ``policy_version``.
A version's directory is removed once a newer one is loaded and no request sent under it is still
in flight (the previous one is kept: SGLang falls back to it when a load fails).

With ``rl.lora`` (``weight_sync: adapter``) only the adapter is saved, ``save_pretrained`` of the
peft model, and served under a new name per version (``<model>-v<V>``, vLLM's
``/v1/load_lora_adapter`` as TRL's async trainer does, or SGLang's ``/load_lora_adapter``); each
request names the adapter of the
version it is stamped with. An adapter is unloaded, and its folder removed, once it is beyond
``max_staleness`` (no group sampled with it could still be trained) and no request uses it (vLLM may
read a loaded adapter's folder again when it evicts it from its CPU cache, so the folder stays until
then). Which adapters are loaded is what the engine reports (``/v1/models``, read at the run's
check): a killed run's leftovers are unloaded like the run's own, and after an engine restart the
folders on disk name adapters it does not hold, which are not unloaded, only removed.
With ``rl.rollout.server.transport: nccl`` (vLLM) no folder is written: the engine client
streams the tensors through TRL's weight-transfer client (:meth:`coa.engines.EngineClient.push_model`).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from coa.engines import EngineClient, EngineError, open_engine
from coa.llm.config import EndpointConfig
from coa.rl.config import RLStageConfig
from coa.rl.serving import SERVER_MODEL_ENV, SERVER_URL_ENV, RLServer
from coa.rollout.policies.endpoint import EndpointError

log = logging.getLogger("coa.rl")


def server_endpoint(params: RLStageConfig) -> RLServer:
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
        endpoint = RLServer(name="rl-server", base_url_env=SERVER_URL_ENV, model=model)
    # one request per generation in flight; the rollout engine bounds them, not the endpoint
    concurrency = max(
        endpoint.max_concurrency, 2 * params.episodes_per_generation * (params.max_staleness + 1)
    )
    return endpoint.model_copy(update={"max_concurrency": concurrency, "max_retries": 0})


def admin_root(endpoint: EndpointConfig) -> str:
    """The server's root (its admin routes), the base URL without ``/v1``."""
    url = endpoint.resolved_base_url()
    return url[: -len("/v1")] if url.endswith("/v1") else url


def engine_for(endpoint: EndpointConfig, pause_mode: Any = "keep") -> EngineClient:
    """The adapter of the engine behind ``endpoint`` (``engine: auto`` probes it)."""
    kind = endpoint.engine if isinstance(endpoint, RLServer) else "auto"
    sglang_pause = endpoint.sglang_pause_mode if isinstance(endpoint, RLServer) else "retract"
    weights = endpoint.transport if isinstance(endpoint, RLServer) else "auto"
    key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
    admin_env = endpoint.admin_api_key_env if isinstance(endpoint, RLServer) else None
    admin_key = os.environ.get(admin_env) if admin_env else None
    if admin_env and not admin_key:
        raise EngineError(
            f"rl.rollout.server.admin_api_key_env names {admin_env}, which is not set: export it (the "
            "server's --admin-api-key) or unset admin_api_key_env"
        )
    return open_engine(
        kind,
        admin_root(endpoint),
        endpoint.model,
        pause_mode=pause_mode,
        sglang_pause_mode=sglang_pause,
        timeout_s=endpoint.timeout_s,
        api_key=key,
        admin_api_key=admin_key,
        weights=weights,
    )


class WeightSync:
    """Pushes the trainer's full weights to a serving engine, one directory per version (optimizer step)."""

    def __init__(
        self,
        endpoint: EndpointConfig,
        folder: Path,
        pause_mode: str = "keep",
        engine: EngineClient | None = None,
        adapter: bool = False,
        retire_after: int = 1,
    ) -> None:
        self.endpoint = endpoint
        self.folder = folder
        self.pause_mode = pause_mode
        self.adapter = adapter
        self.retire_after = retire_after
        """adapter sync: versions (optimizer steps) after which an adapter no group can use is unloaded."""
        self._engine = engine
        self.version: int | None = None
        self.pushes = 0
        self.seconds = 0.0

    @property
    def engine(self) -> EngineClient:
        if self._engine is None:
            self._engine = engine_for(self.endpoint, self.pause_mode)
        return self._engine

    def check(self) -> None:
        """The engine answers, serves the configured model and has every route a push needs (exit 3);
        the engine client takes the engine's own state (a killed run's adapters, a restart's none)."""
        self.engine.check(full_weights=not self.adapter)

    def directory(self, version: int) -> Path:
        return self.folder / f"v{version:06d}"

    def push(self, model: Any, version: int) -> None:
        """Save ``model`` as ``v<version>/`` (the full model, or the adapter alone) and make the engine
        load it as ``version``; an engine that streams weights (NCCL) gets the tensors instead."""
        start = time.perf_counter()
        if self.engine.streams_weights and not self.adapter:  # NCCL: the tensors, no folder
            self.engine.push_model(model, version)
            self.version = version
            self.pushes += 1
            self.seconds += time.perf_counter() - start
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        final, tmp = self.directory(version), self.folder / f".v{version:06d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(str(tmp), safe_serialization=True)  # config.json: SGLang needs a model folder
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        previous, self.version = self.version, version
        if self.adapter:
            self.engine.push_adapter(final, version)
            self.retire(version)
        else:
            self.engine.push_weights(final, version)
            self.prune(keep_from=previous if previous is not None else version)
        self.pushes += 1
        self.seconds += time.perf_counter() - start

    def adopt(self, version: int) -> None:
        """Another rank pushed ``version``: stamp this rank's requests with it."""
        self.version = self.engine.ledger.current = version

    def mismatches(self) -> int:
        """Completions whose engine-reported version disagreed with the client's stamp."""
        return self.engine.ledger.mismatches

    def retire(self, current: int) -> None:
        """Unload the adapters at least ``retire_after`` versions behind ``current`` that no request uses:
        those the engine reports holding (a killed run's included), and remove their folders (and the
        folders of versions it does not hold, e.g. after an engine restart)."""
        for version in sorted(self.engine.held_versions()):
            if current - version >= self.retire_after and self.engine.ledger.unused(version):
                self.engine.retire_adapter(version)
        held = self.engine.held_versions()
        for path in sorted(self.folder.glob("v*")):
            version = int(path.name[1:])
            if current - version >= self.retire_after and version not in held:
                shutil.rmtree(path, ignore_errors=True)

    def prune(self, keep_from: int) -> None:
        """Remove the directories older than ``keep_from`` that no request in flight was sent under."""
        for path in self.folder.glob("v*"):
            version = int(path.name[1:])
            if version < keep_from and self.engine.ledger.unused_below(version + 1):
                shutil.rmtree(path, ignore_errors=True)

    def clean(self) -> None:
        """Remove the weight directories this run wrote (each was loaded before its push returned) and
        unload its adapters (adapter sync: the next run on the server reuses their names)."""
        if self._engine is not None:
            try:
                if self.adapter:
                    self._engine.retire_adapters()
            except EngineError as e:  # the end of a run (maybe a failed one): say so, never mask its error
                log.warning("could not unload this run's adapters from the server: %s", e)
            finally:
                self._engine.close()
        for path in self.folder.glob("v*"):
            shutil.rmtree(path, ignore_errors=True)
