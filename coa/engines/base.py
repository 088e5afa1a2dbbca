"""What every engine client shares: the errors, the client-side version ledger, the HTTP calls.

A serving engine used as an RL rollout server gets the trainer's weights pushed to it as version
``V`` and generates token ids; vLLM reports nothing per completion about the weights that sampled
it, SGLang reports per-token spans. So the client stamps each request with the version the engine
will run it on (:meth:`WeightLedger.stamp`: the version it holds, or the one a push that has paused
it is loading); where the engine reports a version (SGLang), the report is the completion's version
(:meth:`EngineClient.version_of`) and a disagreement with the stamp is counted
(:attr:`WeightLedger.mismatches`).

:class:`EngineClient` is the interface each adapter implements (:mod:`coa.engines.vllm`,
:mod:`coa.engines.sglang`): check the routes it needs, push full weights or a LoRA adapter as a
version, name the model a request uses, read an engine-reported version off a completion.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from coa.errors import InfraError, UserError

EngineKind = Literal["vllm", "sglang", "coa"]
"""vllm = ``vllm serve`` (or ``trl vllm-serve``); sglang = ``sglang.launch_server``; coa = coa.serve."""


class EngineError(InfraError, RuntimeError):
    """The serving engine is unreachable, lacks a route, or refused an update (exit 3)."""


class UnknownName(EngineError):
    """The engine has the route but not the thing named (vLLM's 404 ``NotFoundError`` for an adapter it
    does not hold, e.g. after a restart): the caller decides whether that is an error."""


class ContextOverflow(UserError, ValueError):
    """A prompt plus its generation budget is longer than the engine's ``max_model_len`` (exit 2)."""


def is_context_overflow(status: int, text: str) -> bool:
    """Whether an engine's error answer says the request is longer than its context."""
    lowered = text.lower()
    return status == 400 and ("maximum context length" in lowered or "max_model_len" in lowered)


class WeightLedger:
    """The client's record of which weight version each request was sent under (thread-safe).

    ``current`` is the version the engine holds (set by a push before the engine resumes);
    :meth:`stamp` / :meth:`release` count the requests in flight per version, so a version's files
    are removed only once no request can still use them (:meth:`unused_below`).

    A full-weight push that has paused the engine is ``pending`` (:meth:`begin`): a request sent
    then waits in the engine's queue until the engine resumes on the new weights (vLLM 0.31 queues
    every request added while paused, ``v1/engine/core.py`` ``pause_scheduler``: "All pause modes
    queue new adds"; SGLang's tokenizer manager holds it until ``continue_generation``,
    ``tokenizer_manager.py`` ``generate_request`` waiting on ``is_pause_cond``), so it is stamped
    with the pushed version. Should the push fail (:meth:`abandon`), the engine resumes on the old
    weights and :meth:`resolve` gives those requests the old version back.
    """

    def __init__(self, current: int = 0) -> None:
        self.current = current
        self.pending: int | None = None
        self.abandoned: dict[int, int] = {}
        """A push that failed: its version -> the version the engine kept (what its requests ran on)."""
        self.in_flight: Counter[int] = Counter()
        self.mismatches = 0
        self.reported = 0
        self._lock = threading.Lock()

    def stamp(self) -> int:
        with self._lock:
            version = self.current if self.pending is None else self.pending
            self.in_flight[version] += 1
            return version

    def begin(self, version: int) -> None:
        """The engine is paused for a push of ``version``: requests sent from now on run on it."""
        with self._lock:
            self.pending = version
            self.abandoned.pop(version, None)

    def abandon(self) -> None:
        """The pending push failed: the engine resumes on ``current``."""
        with self._lock:
            if self.pending is not None and self.pending != self.current:
                self.abandoned[self.pending] = self.current
            self.pending = None

    def resolve(self, stamped: int) -> int:
        """The version a request stamped ``stamped`` ran on (the stamp, unless its push failed)."""
        with self._lock:
            return self.abandoned.get(stamped, stamped)

    def release(self, version: int) -> None:
        with self._lock:
            self.in_flight[version] -= 1
            if self.in_flight[version] <= 0:
                del self.in_flight[version]

    def check(self, stamped: int, reported: str | None) -> None:
        """Count an engine-reported version that is not the stamped one (None: the engine reports none)."""
        if reported is None:
            return
        with self._lock:
            self.reported += 1
            if str(reported) != str(stamped):
                self.mismatches += 1

    def set(self, version: int) -> None:
        with self._lock:
            self.current = version
            self.pending = None

    def unused(self, version: int) -> bool:
        """No request sent under ``version`` is still in flight."""
        with self._lock:
            return self.in_flight[version] <= 0

    def unused_below(self, version: int) -> bool:
        """No request sent under a version older than ``version`` is still in flight."""
        with self._lock:
            return not any(v < version for v in self.in_flight)


class EngineClient(ABC):
    """One serving engine, reached over HTTP at ``root`` (its address without ``/v1``)."""

    kind: EngineKind
    tis_fix = "set rl.is_correction: none, or sample at temperature 1"
    streams_weights = False
    """Full weights travel as tensors (:meth:`push_model`), not as a folder (:meth:`push_weights`)."""
    logprobs_processed: bool | None = None
    """Whether the engine's logprobs are those of the sampling distribution (after temperature):
    True / False when known, None when the engine cannot tell (then TIS is refused)."""

    def __init__(
        self,
        root: str,
        model: str,
        *,
        timeout_s: float = 600.0,
        api_key: str | None = None,
        admin_api_key: str | None = None,
        transport: Any = None,
    ) -> None:
        import httpx

        self.root = root.rstrip("/")
        self.model = model
        self.ledger = WeightLedger()
        self.old_kv_pushes = 0
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(timeout=timeout_s, headers=headers, transport=transport)
        self.admin_headers = {"Authorization": f"Bearer {admin_api_key}"} if admin_api_key else {}
        """The header of the admin routes (SGLang's ``--admin-api-key``); none: the client's own."""

    # ------------------------------------------------------------------ the interface

    @abstractmethod
    def check(self, full_weights: bool = True) -> None:
        """The engine serves ``model`` and has every route a push needs (``full_weights``: of full
        weights, else of LoRA adapters), else one line with the fix; the client's state (loaded
        adapters, version) is then reconciled with what the engine reports."""

    @abstractmethod
    def push_weights(self, directory: Path, version: int) -> None:
        """Load the full weights in ``directory`` (a HF model folder of safetensors) as ``version``."""

    def push_model(self, model: Any, version: int) -> None:
        """Stream ``model``'s weights to the engine as ``version`` (engines with :attr:`streams_weights`)."""
        raise EngineError(f"the {self.kind} client pushes weights as a folder, not as tensors")

    @abstractmethod
    def push_adapter(self, directory: Path, version: int) -> None:
        """Serve the peft LoRA adapter in ``directory`` as ``version`` (requests then name it)."""

    def retire_adapter(self, version: int) -> None:  # noqa: B027 - only LoRA-capable engines override it
        """Unload the adapter of ``version`` (its requests are done or dropped)."""

    def retire_adapters(self) -> None:  # noqa: B027 - only LoRA-capable engines override it
        """Unload every adapter this client loaded, the served one too (the end of a run)."""

    def request_model(self, version: int | None = None) -> str:
        """The ``model`` a request stamped with ``version`` names (the base model, or that version's
        adapter under a LoRA sync: the stamp and the adapter a request uses are then one)."""
        return self.model

    def refuse_tis(self, temperature: float) -> None:
        """Raise when TIS would divide by logprobs of another distribution than the one sampled."""
        if temperature != 1.0 and self.logprobs_processed is not True:
            seen = "raw" if self.logprobs_processed is False else "of unknown kind"
            raise EngineError(
                f"{self.kind} server logprobs are {seen}, not those of the sampling distribution at "
                f"temperature {temperature}, so TIS would divide by the wrong probability: {self.tis_fix}"
            )

    def reported_version(self, payload: dict[str, Any]) -> str | None:
        """The weight version the engine reports for a completion (None: it reports none)."""
        return None

    def held_versions(self) -> set[int]:
        """The versions whose adapters the engine holds, as it reported them (LoRA-capable engines)."""
        return set()

    def keeps_old_kv(self) -> bool:
        """Whether a generation running across a push continues on the new weights with its old KV cache."""
        return False

    def version_of(self, stamped: int, payload: dict[str, Any]) -> int:
        """The weight version a completion of a request stamped ``stamped`` was sampled under (its
        first token's): the stamp (resolved should its push have failed), unless the engine reports a
        version (SGLang)."""
        return self.ledger.resolve(stamped)

    def old_kv(self, stamped: int, payload: dict[str, Any]) -> bool:
        """Whether the completion of a request stamped ``stamped`` used old-weight KV: its engine keeps
        running requests' KV across a push (:meth:`keeps_old_kv`) and a push landed after it was sent
        (it ran across it, or was queued behind it with the old version's ``cache_salt``, so it may have
        reused that version's prefix blocks)."""
        return self.keeps_old_kv() and self.ledger.current != self.ledger.resolve(stamped)

    @staticmethod
    def cache_salt(version: int) -> str:
        """The ``cache_salt`` of a request stamped ``version`` (vLLM and SGLang completions take it):
        prefix-cache entries are shared within a version and never across versions, so a request never
        reuses KV an older version's weights computed, even where the cache could not be reset."""
        return f"coa-weights-v{version}"

    # ------------------------------------------------------------------ HTTP

    def call(
        self, method: str, route: str, fix: str, *, admin: bool = False, refusal: bool = False, **kwargs: Any
    ) -> Any:
        """``method`` ``route`` (``admin``: with the admin routes' key); a 404 for a missing route names
        the route and ``fix``, a 404 naming an unknown thing is :class:`UnknownName`, a refused key
        names the setting that holds it, any other failure is the answer. ``refusal``: a 400 whose
        body is the route's own ``{"success": false, ...}`` answer is returned, not raised."""
        import httpx

        url = f"{self.root}{route}"
        if admin and self.admin_headers:
            kwargs["headers"] = self.admin_headers | kwargs.get("headers", {})
        try:
            response = self.http.request(method, url, **kwargs)
        except httpx.HTTPError as e:
            raise EngineError(f"{self.kind} server {url} unreachable ({type(e).__name__}: {e}): {fix}") from e
        if response.status_code in (401, 403):
            setting = "admin_api_key_env" if admin and self.admin_headers else "api_key_env"
            raise EngineError(
                f"{self.kind} server refused the key of {method} {route} (HTTP {response.status_code}): "
                f"set rl.rollout.server.{setting} to the variable holding {self.key_flag(admin)}"
            )
        unknown = not_found_message(response) if response.status_code == 404 else None
        if unknown is not None:
            raise UnknownName(f"{self.kind} server {method} {route} answered 404: {unknown}")
        if response.status_code in (404, 405):
            raise EngineError(
                f"{self.kind} server has no {method} {route} (HTTP {response.status_code}): {fix}"
            )
        if refusal and response.status_code == 400:
            refused = json_object(response)
            if refused is not None and refused.get("success") is False:
                return refused
        if response.status_code != 200:
            text = " ".join(response.text[:300].split())
            raise EngineError(f"{self.kind} server {method} {route} answered {response.status_code}: {text}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    def key_flag(self, admin: bool) -> str:
        """The engine's option that sets the key a route checks (``admin``: an admin route)."""
        return "its --api-key"

    def served_models(self) -> list[str]:
        data = self.call("GET", "/v1/models", "start the server with the served model name").get("data", [])
        return [str(m.get("id")) for m in data]

    def check_model(self, fix: str) -> None:
        served = self.served_models()
        if self.model not in served:
            raise EngineError(
                f"{self.kind} server at {self.root} does not serve {self.model!r} (it serves {served}): "
                f"set rl.rollout.server.model to the served model name or {fix}"
            )

    def close(self) -> None:
        self.http.close()


def json_object(response: Any) -> dict[str, Any] | None:
    """The JSON object an answer holds (None: no JSON object)."""
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def not_found_message(response: Any) -> str | None:
    """The message of an engine's own 404 error body (vLLM's ``{"error": {"message", "type":
    "NotFoundError"}}``, ``create_error_response`` of ``serve/utils/error_response.py``, or the flat
    ``{"message", "type"}`` of older vLLM and coa.serve); None for a router's ``{"detail": "Not Found"}``,
    i.e. a route the server does not have."""
    body = json_object(response)
    if body is None:
        return None
    nested = body.get("error")
    error: dict[str, Any] = nested if isinstance(nested, dict) else body
    message = error.get("message")
    if error.get("type") == "NotFoundError" and isinstance(message, str):
        return " ".join(message.split())
    return None
