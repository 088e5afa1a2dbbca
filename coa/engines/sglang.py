"""SGLang 0.5.23 (``python -m sglang.launch_server``) as an RL rollout server.

Routes and bodies are SGLang's (``sglang/srt/entrypoints/http_server.py``, the structs of
``sglang/srt/managers/io_struct.py``): a push is ``POST /pause_generation {"mode": "retract"}``
(running requests go back to the queue and recompute their KV on the new weights; ``in_place``
keeps them and their old KV) → ``POST /update_weights_from_disk {"model_path": <directory>,
"weight_version": "<V>", "flush_cache": ...}`` (a directory with ``config.json``: anything else
is taken as a hub id) → ``POST /continue_generation {}``. Completions report the weights in
``metadata.weight_version`` and ``metadata.weight_versions`` (token spans); the client compares
the first span with its stamp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from coa.engines.base import EngineClient, EngineError

ADMIN_FIX = "run SGLang >= 0.5 (python -m sglang.launch_server) and pass its --admin-api-key if one is set"


class SGLangEngine(EngineClient):
    """SGLang's pause / update-from-disk / continue routes."""

    kind = "sglang"
    logprobs_processed = True  # SGLang's logprobs are of the sampling distribution unless
    # SGLANG_RETURN_ORIGINAL_LOGPROB is set on the server (inferred from its sampler; not checkable over HTTP)

    def __init__(
        self, root: str, model: str, *, pause_mode: Literal["retract", "in_place"] = "retract", **kwargs: Any
    ) -> None:
        super().__init__(root, model, **kwargs)
        self.pause_mode = pause_mode

    def keeps_old_kv(self) -> bool:
        return self.pause_mode == "in_place"

    def check(self) -> None:
        self.check_model("start SGLang with --served-model-name <model>")
        self.call("GET", "/model_info", ADMIN_FIX)

    def push_weights(self, directory: Path, version: int) -> None:
        if not (directory / "config.json").is_file():
            raise EngineError(
                f"{directory} has no config.json: SGLang would read it as a hub id; push a model folder"
            )
        self.call("POST", "/pause_generation", ADMIN_FIX, json={"mode": self.pause_mode})
        try:
            body = {
                "model_path": str(directory.resolve()),
                "weight_version": str(version),
                # in_place keeps running requests, and SGLang refuses a cache flush while they run
                "flush_cache": self.pause_mode == "retract",
            }
            answer = self.call("POST", "/update_weights_from_disk", ADMIN_FIX, json=body)
            if isinstance(answer, dict) and answer.get("success") is False:
                raise EngineError(
                    f"sglang server refused the weights of {directory}: {answer.get('message')}"
                )
            self.ledger.set(version)
        finally:
            self.call("POST", "/continue_generation", ADMIN_FIX, json={})

    def push_adapter(self, directory: Path, version: int) -> None:
        raise EngineError(
            "the sglang client pushes full weights only: set rl.rollout.server.engine: vllm for LoRA policies"
        )

    def reported_version(self, payload: dict[str, Any]) -> str | None:
        """The version of the first generated token (``weight_versions[0]``), else ``weight_version``."""
        metadata = payload.get("metadata") or {}
        spans = metadata.get("weight_versions")
        if spans:
            first = spans[0]
            return str(first["version"] if isinstance(first, dict) else first[0])
        version = metadata.get("weight_version")
        return None if version is None else str(version)
