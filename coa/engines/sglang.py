"""SGLang 0.5.23 (``python -m sglang.launch_server``) as an RL rollout server.

Routes and bodies are SGLang's (``sglang/srt/entrypoints/http_server.py``, the structs of
``sglang/srt/managers/io_struct.py``): a push is ``POST /pause_generation {"mode": "retract"}``
(running requests go back to the queue and recompute their KV on the new weights; ``in_place``
keeps them and their old KV) → ``POST /update_weights_from_disk {"model_path": <directory>,
"weight_version": "<V>", "flush_cache": ...}`` (a directory with ``config.json``: anything else
is taken as a hub id) → ``POST /continue_generation {}``. Completions report the weights in
``metadata.weight_version`` (the last token's) and ``metadata.weight_versions`` (token spans,
``srt/utils/weight_versions.py`` ``add_weight_versions_to_meta_info``): a completion's version is
its first span's (:meth:`SGLangEngine.version_of`), compared with the client's stamp.

Keys (``srt/utils/auth.py`` ``decide_request_auth``, the levels set by ``@auth_level`` in
``http_server.py``): the admin routes (``pause_generation``, ``continue_generation``,
``update_weights_from_disk``, ``update_weight_version``, ``flush_cache``, ``load_lora_adapter``,
``unload_lora_adapter``: ``ADMIN_OPTIONAL``) take ``--admin-api-key`` when the server has one, and
then refuse ``--api-key``; the others (``/v1/completions``, ``/v1/models``, ``/model_info``:
``NORMAL``) take ``--api-key`` when it is set and never the admin key. A refused key is 401
``{"error": "Unauthorized"}``. So the client sends ``rl.rollout.server.admin_api_key_env``'s key
to the admin routes and ``api_key_env``'s to the others.

After the first successful ``/update_weights_from_disk`` SGLang serves the model under the pushed
folder's path (``srt/managers/tokenizer_manager.py`` ``_update_model_path_info``: the served model
name follows ``model_path``), so ``/v1/models`` no longer lists ``--served-model-name``; completions
do not check ``model``. :meth:`SGLangEngine.check` accepts that state, reported by the engine
itself (a served path and a pushed ``weight_version`` in ``/model_info``), so a second run on the
same server and a resume work; a restarted SGLang serves the configured name again.

``in_place`` keeps the running requests and their KV, and SGLang refuses to flush its radix cache
while they run (``flush_cache`` is sent false): a request that ran across the push has old KV, and
one queued behind it may reuse old-weight prefixes. :meth:`SGLangEngine.old_kv` reads SGLang's own
per-token ``weight_versions`` spans for that: a completion with more than one span ran across a push,
one whose first span is newer than its stamp was queued behind one (and its ``cache_salt`` was the
old version's). A request sent once ``/pause_generation`` returned waits in the tokenizer manager
until ``/continue_generation`` (``generate_request`` waits on ``is_pause_cond``): it is stamped with
the pushed version, as its spans then say.

LoRA (a server started with ``--enable-lora``, ``--max-lora-rank`` and ``--lora-target-modules``):
a push is ``POST /load_lora_adapter {"lora_name": "<model>-v<V>", "lora_path": <adapter folder>}``
(``LoadLoRAAdapterReqInput``; answers ``LoRAUpdateOutput {"success", "error_message",
"loaded_adapters"}``, 400 when ``success`` is false), with no pause: the running requests keep the
adapter they named (``lora_registry.py``: an unload waits for the requests using the adapter). A
request names its version's adapter as ``model: "<model>:<adapter>"`` (``serving_base.py``
``_parse_model_parameter``: the name after the served model's name and a colon). An adapter name a
killed run left loaded fails the load ("... because it is already loaded", ``lora_manager.py``
``validate_new_adapter``): it is unloaded and loaded again. An adapter SGLang does not hold fails the
unload with 400 "LoRA with name ... does not exist" (``lora_registry.py`` ``unregister``): no error
(a restarted engine). ``/v1/models`` lists the loaded adapters by name (``parent``: the base):
:meth:`SGLangEngine.check` takes a killed run's from there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from coa.engines.base import EngineClient, EngineError
from coa.engines.lora import AdapterVersions

ADMIN_FIX = "run SGLang >= 0.5 (python -m sglang.launch_server) and pass its --admin-api-key if one is set"
LORA_FIX = (
    "start SGLang with --enable-lora --max-lora-rank R --lora-target-modules <the adapter's modules> "
    "(one data-parallel replica: SGLang loads adapters at run time only with --dp-size 1)"
)


class SGLangEngine(AdapterVersions, EngineClient):
    """SGLang's pause / update-from-disk / continue routes, and its LoRA routes."""

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
        self.init_adapters()

    def key_flag(self, admin: bool) -> str:
        if admin:
            return "SGLang's --admin-api-key (set, it is the only key its admin routes take)"
        return "SGLang's --api-key (its completion and model routes never take the admin key)"

    def keeps_old_kv(self) -> bool:
        # a LoRA request names its version's adapter, which serves it to its end: no push changes it
        return self.pause_mode == "in_place" and self.adapter is None

    def check(self, full_weights: bool = True) -> None:
        data = self.call("GET", "/v1/models", "start the server with the served model name").get("data", [])
        served = [str(card.get("id")) for card in data if not card.get("parent")]
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
        self.find_adapters(data)  # a killed run's adapters (a restarted SGLang holds none)

    def version_name(self, version: int) -> str:
        """SGLang's name of the ledger's ``version`` (a pushed version's number, else its start name)."""
        if self.unpushed is not None and self.unpushed[0] == version:
            return self.unpushed[1]
        return str(version)

    def version_number(self, name: str) -> int | None:
        """The ledger's version SGLang names ``name`` (None: a name this client did not push)."""
        if name.isdigit():
            return int(name)
        if self.unpushed is not None and self.unpushed[1] == name:
            return self.unpushed[0]
        return None

    def push_weights(self, directory: Path, version: int) -> None:
        if not (directory / "config.json").is_file():
            raise EngineError(
                f"{directory} has no config.json: SGLang would read it as a hub id; push a model folder"
            )
        self.call("POST", "/pause_generation", ADMIN_FIX, admin=True, json={"mode": self.pause_mode})
        self.ledger.begin(version)  # paused: requests sent from now on wait for the new weights
        try:
            body = {
                "model_path": str(directory.resolve()),
                "weight_version": str(version),
                # in_place keeps running requests, and SGLang refuses a cache flush while they run
                "flush_cache": self.pause_mode == "retract",
            }
            answer = self.call("POST", "/update_weights_from_disk", ADMIN_FIX, admin=True, json=body)
            if isinstance(answer, dict) and answer.get("success") is False:
                raise EngineError(
                    f"sglang server refused the weights of {directory}: {answer.get('message')}"
                )
            self.ledger.set(version)
        finally:
            self.ledger.abandon()  # a failed push: SGLang goes on with the old weights
            self.call("POST", "/continue_generation", ADMIN_FIX, admin=True, json={})

    # ------------------------------------------------------------------ LoRA

    def request_model(self, version: int | None = None) -> str:
        """``<model>:<adapter>`` under a LoRA sync (SGLang's ``_parse_model_parameter``), else the model."""
        if version is not None and version in self.adapters:
            return f"{self.model}:{self.adapter_name(version)}"
        return f"{self.model}:{self.adapter}" if self.adapter is not None else self.model

    def push_adapter(self, directory: Path, version: int) -> None:
        name = self.adapter_name(version)
        body = {"lora_name": name, "lora_path": str(directory.resolve())}
        answer = self.lora("/load_lora_adapter", body)
        if not answer.get("success") and "already loaded" in str(answer.get("error_message")):
            # a killed run (or one resumed at this version) left an adapter of this name: replace it
            self.unload(name)
            answer = self.lora("/load_lora_adapter", body)
        if not answer.get("success"):
            raise EngineError(
                f"sglang server could not load the adapter {name} from {directory}: "
                f"{' '.join(str(answer.get('error_message')).split())}: {LORA_FIX}"
            )
        self.adapters.add(version)
        self.adapter = name
        self.ledger.set(version)

    def unload(self, name: str) -> bool:
        """Unload adapter ``name``; False when SGLang does not hold it (its 400 "LoRA with name ... does
        not exist", ``lora_registry.py`` ``unregister``): no error, as after a restart."""
        answer = self.lora("/unload_lora_adapter", {"lora_name": name})
        if answer.get("success"):
            return True
        message = " ".join(str(answer.get("error_message")).split())
        if "does not exist" in message:
            return False
        raise EngineError(f"sglang server could not unload the adapter {name}: {message}: {LORA_FIX}")

    def lora(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST route`` of SGLang's LoRA routes: its ``LoRAUpdateOutput``, a refusal (400) included."""
        answer = self.call("POST", route, LORA_FIX, admin=True, refusal=True, json=body)
        if not isinstance(answer, dict):
            raise EngineError(f"sglang server POST {route} answered {answer!r}, not its LoRAUpdateOutput")
        return answer

    # ------------------------------------------------------------------ what a completion reports

    def reported_version(self, payload: dict[str, Any]) -> str | None:
        """The version of the first generated token (``weight_versions[0]``), else ``weight_version``;
        None under a LoRA sync (an adapter load moves no ``weight_version``: the adapter is the version)."""
        if self.adapter is not None:
            return None
        spans = span_versions(payload)
        if spans:
            return spans[0]
        version = (payload.get("metadata") or {}).get("weight_version")
        return None if version is None else str(version)

    def version_of(self, stamped: int, payload: dict[str, Any]) -> int:
        """The version SGLang reports for the completion's first token, when it names a version this
        client knows; else the stamp."""
        reported = self.reported_version(payload)
        number = self.version_number(reported) if reported is not None else None
        return number if number is not None else self.ledger.resolve(stamped)

    def old_kv(self, stamped: int, payload: dict[str, Any]) -> bool:
        if not self.keeps_old_kv():
            return False
        spans = span_versions(payload)
        if not spans:  # no report: a push after it was sent may have kept its KV
            return self.ledger.current != self.ledger.resolve(stamped)
        return len(set(spans)) > 1 or spans[0] != self.version_name(self.ledger.resolve(stamped))


def span_versions(payload: dict[str, Any]) -> list[str]:
    """The versions of a completion's ``metadata.weight_versions`` spans, in token order (SGLang's
    ``{version, start, end}`` objects, ``srt/utils/weight_versions.py``)."""
    spans = (payload.get("metadata") or {}).get("weight_versions") or []
    return [str(span["version"] if isinstance(span, dict) else span[0]) for span in spans]


def renamed(served: list[str]) -> bool:
    """SGLang serves a pushed folder's path (an absolute path) in place of ``--served-model-name``."""
    return any(name.startswith("/") for name in served)
