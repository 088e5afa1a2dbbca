"""Where RL's episodes come from: the rollout source (``rl.rollout``) and, for
``rl.rollout.backend: server``, the completions server and its engine (``rl.rollout.server``).
Part of the RL stage's config (:mod:`coa.rl.config`), split out as its own concern."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from coa.config import StrictModel
from coa.llm.config import EndpointConfig

SERVER_URL_ENV = "COA_RL_SERVER_URL"
SERVER_MODEL_ENV = "COA_RL_SERVER_MODEL"


class RLServer(EndpointConfig):
    """The completions server of ``rl.rollout.backend: server``: an endpoint and the engine behind it."""

    engine: Literal["auto", "vllm", "sglang", "coa"] = Field(
        default="auto",
        description="Which engine serves the rollouts: vllm (`vllm serve` or `trl vllm-serve`, full weights "
        "through its own reload_weights), sglang (`sglang.launch_server`), coa (`python -m coa.serve`); "
        "auto = probe /model_info and /v1/models (docs/how-to/rl-async.md gives each command line).",
    )
    transport: Literal["auto", "reload", "worker_extension", "nccl"] = Field(
        default="auto",
        description="How full weights reach vLLM: auto / reload = a folder per version loaded by vLLM >= "
        "0.31's reload_weights(weights_path) via /collective_rpc (one filesystem); "
        "worker_extension = the same by the coa worker extension (older vLLM, dense models); "
        "nccl = over NCCL through TRL's weight-transfer client (not yet run against a real "
        "engine). coa.serve always takes the folder.",
    )
    replicas: tuple[str, ...] = Field(
        default=(),
        description="Base URLs (with /v1) of further replicas of this server (same model and engine): "
        "each push goes to every replica, generations go to each in turn (docs/how-to/multi-"
        "node.md).",
    )
    admin_api_key_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="SGLang only: NAME of the environment variable holding the server's --admin-api-key "
        "(never the key itself). Its admin routes (pause, weight updates, LoRA loading) then take this "
        "key and refuse api_key_env's; completions take api_key_env's. Null: api_key_env's for all.",
    )
    sglang_pause_mode: Literal["retract", "in_place"] = Field(
        default="retract",
        description="SGLang's pause for a weight push: retract = running requests recompute their KV on "
        "the new weights; in_place = they continue with the old KV cache (recorded as such).",
    )


class RLRollout(StrictModel):
    """Where the RL episodes are generated (``rl.rollout``)."""

    backend: Literal["hf", "hf_batched", "server"] = Field(
        default="hf",
        description="hf = transformers generate on the trainer's own weights (micro-batched, lockstep); "
        "hf_batched = continuous batching in process on the trainer's own weights (no second copy); "
        "server = an OpenAI-compatible completions server speaking vLLM's token-id protocol (`python -m "
        "coa.serve`, or vLLM), its weights synced from the trainer before each generation batch.",
    )
    server: RLServer | None = Field(
        default=None,
        description="The completions server of backend=server (base_url or base_url_env, and the served "
        f"model name); null = base URL from ${SERVER_URL_ENV} and model from ${SERVER_MODEL_ENV}.",
    )
    weight_sync: Literal["auto", "full", "adapter"] = Field(
        default="auto",
        description="How the server gets the trainer's weights: full = a model folder per version "
        "(safetensors) the engine loads through its own routes; adapter = the LoRA adapter of `rl.lora`, "
        "one folder and one adapter name per version (vLLM's /v1/load_lora_adapter, SGLang's "
        "/load_lora_adapter, coa.serve's either), "
        "requests naming it; auto = adapter with `rl.lora`, else full (coa.engines; the folder must be "
        "on a filesystem both reach).",
    )
    pause_mode: Literal["keep", "wait"] = Field(
        default="keep",
        description="How a vLLM-protocol server pauses for a weight update: keep = running generations "
        "continue on the new weights with their old KV (clear_cache=false; their rows say "
        "old_kv); wait = they finish first. The prefix cache is reset after every push; "
        "requests carry a cache_salt per version.",
    )

    @field_validator("server", mode="before")
    @classmethod
    def _endpoint_as_server(cls, value: object) -> object:
        """A plain :class:`EndpointConfig` is a server of engine ``auto``."""
        if isinstance(value, EndpointConfig) and not isinstance(value, RLServer):
            return value.model_dump(exclude_unset=True)
        return value

    sync_dir: str | None = Field(
        default=None,
        description="Folder the weight files are written to (null = `weight_sync/` in the run's output "
        "folder); the server must read the same path.",
    )
