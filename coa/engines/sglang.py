"""SGLang 0.5.23 (``python -m sglang.launch_server``) as an RL rollout server.

Routes and bodies are SGLang's (``sglang/srt/entrypoints/http_server.py``, the structs of
``sglang/srt/managers/io_struct.py``): a push is ``POST /pause_generation {"mode": "retract"}``
(running requests go back to the queue and recompute their KV on the new weights; ``in_place``
keeps them and their old KV) → ``POST /update_weights_from_disk {"model_path": <directory>,
"weight_version": "<V>", "flush_cache": ...}`` (a directory with ``config.json``: anything else
is taken as a hub id) → ``POST /continue_generation {}``. Completions report the weights in
``metadata.weight_version`` and ``metadata.weight_versions`` (token spans); the client compares
the first span with its stamp.

After the first successful ``/update_weights_from_disk`` SGLang serves the model under the pushed
folder's path (``srt/managers/tokenizer_manager.py``, the update handler: the served model name
follows ``model_path``), so ``/v1/models`` no longer lists ``--served-model-name``; completions do
not check ``model``. :meth:`SGLangEngine.check` accepts that state, reported by the engine itself (a
served path and a pushed ``weight_version`` in ``/model_info``), so a second run on the same server
and a resume work; a restarted SGLang serves the configured name again.

``in_place`` keeps the running requests and their KV, and SGLang refuses to flush its radix cache
while they run (``flush_cache`` is sent false): a request that ran across the push has old KV, and
one queued behind it may reuse old-weight prefixes. :meth:`SGLangEngine.old_kv` reads SGLang's own
per-token ``weight_versions`` spans for that: a completion with more than one span ran across a push,
one whose first span is newer than its stamp was queued behind one (and its ``cache_salt`` was the
old version's).
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
        self.unpushed: tuple[int, str] | None = None
        """The ledger's version and SGLang's name for the weights it started with (``"default"``)."""

    def keeps_old_kv(self) -> bool:
        return self.pause_mode == "in_place"

    def check(self, full_weights: bool = True) -> None:
        served = self.served_models()
        info = self.call("GET", "/model_info", ADMIN_FIX)
        version = info.get("weight_version") if isinstance(info, dict) else None
        if self.model not in served and not (renamed(served) and version not in (None, "default")):
            raise EngineError(
                f"sglang server at {self.root} does not serve {self.model!r} (it serves {served}, weights "
                f"{version!r}): set rl.rollout.server.model to its --served-model-name, or start SGLang with "
                f"--served-model-name {self.model}"
            )
        if isinstance(version, str) and version.isdigit():
            self.ledger.set(int(version))
        elif isinstance(version, str):
            self.unpushed = (self.ledger.current, version)

    def version_name(self, version: int) -> str:
        """SGLang's name of the ledger's ``version`` (a pushed version's number, else its start name)."""
        if self.unpushed is not None and self.unpushed[0] == version:
            return self.unpushed[1]
        return str(version)

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
        spans = span_versions(payload)
        if spans:
            return spans[0]
        version = (payload.get("metadata") or {}).get("weight_version")
        return None if version is None else str(version)

    def old_kv(self, stamped: int, payload: dict[str, Any]) -> bool:
        if not self.keeps_old_kv():
            return False
        spans = span_versions(payload)
        if not spans:  # no report: a push after it was sent may have kept its KV
            return self.ledger.current != stamped
        return len(set(spans)) > 1 or spans[0] != self.version_name(stamped)


def span_versions(payload: dict[str, Any]) -> list[str]:
    """The versions of a completion's ``metadata.weight_versions`` spans, in token order (SGLang's
    ``{version, start, end}`` objects, ``srt/utils/weight_versions.py``)."""
    spans = (payload.get("metadata") or {}).get("weight_versions") or []
    return [str(span["version"] if isinstance(span, dict) else span[0]) for span in spans]


def renamed(served: list[str]) -> bool:
    """SGLang serves a pushed folder's path (an absolute path) in place of ``--served-model-name``."""
    return any(name.startswith("/") for name in served)
