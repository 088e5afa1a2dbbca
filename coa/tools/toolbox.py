"""The tools the agents can call, behind one async interface, with record/replay.

:class:`FunctionToolBox` maps tool names (``web_search``, ``wiki_search``, ``crawl_page``,
``code``) to plain functions ``str -> str`` and runs them in worker threads. With an
:class:`ObservationStore` every result is recorded (tool, argument, provider, time → observation),
so a collection run can be replayed offline and RL or evaluation can run against recorded tools.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import hashlib
import json
import posixpath
import time
from collections.abc import Callable, Mapping
from typing import Literal, Protocol

from coa.config import canonical_json
from coa.errors import UserError
from coa.io import filesystem, write_atomic
from coa.settings import scrub
from coa.tools.sandbox import SandboxUnavailable

ToolFn = Callable[[str], str]
StoreMode = Literal["record", "replay", "auto"]


@dataclasses.dataclass(frozen=True)
class ToolResult:
    observation: str
    error: str | None = None
    latency_s: float = 0.0
    replayed: bool = False


class ToolBox(Protocol):
    @property
    def tools(self) -> tuple[str, ...]: ...

    async def call(self, name: str, argument: str) -> ToolResult: ...


class ReplayMiss(UserError, LookupError):
    """Replay mode found no recording for a call."""


class ObservationStore:
    """Recorded tool results under ``{root}/observations/``, keyed by tool, provider and argument.

    Modes: ``record`` (always call, store the result), ``replay`` (never call; a miss is an error),
    ``auto`` (use a recording when present, else call and record).
    """

    def __init__(self, root: str, mode: StoreMode = "auto") -> None:
        self.root = posixpath.join(root.rstrip("/"), "observations")
        self.mode = mode
        self.fs, self.path = filesystem(self.root)

    @staticmethod
    def key(tool: str, provider: str, argument: str) -> str:
        return hashlib.sha256(canonical_json([tool, provider, argument]).encode()).hexdigest()

    def _file(self, key: str) -> str:
        return posixpath.join(self.path, key[:2], f"{key}.json")

    def get(self, tool: str, provider: str, argument: str) -> str | None:
        try:
            with self.fs.open(self._file(self.key(tool, provider, argument)), "rb") as fh:
                return str(json.loads(fh.read())["observation"])
        except FileNotFoundError:
            return None

    def put(self, tool: str, provider: str, argument: str, observation: str) -> None:
        key = self.key(tool, provider, argument)
        record = {
            "tool": tool,
            "provider": provider,
            "argument": scrub(argument),
            "observation": scrub(observation),
            "recorded_at": dt.datetime.now(dt.UTC).isoformat(),
        }
        write_atomic(self.fs, self._file(key), json.dumps(record, ensure_ascii=False).encode())


class FunctionToolBox:
    """Tools as plain functions, run in threads, optionally recorded/replayed."""

    def __init__(
        self,
        functions: Mapping[str, ToolFn],
        providers: Mapping[str, str] | None = None,
        store: ObservationStore | None = None,
        timeout_s: float = 120.0,
    ) -> None:
        self.functions = dict(functions)
        self.providers = dict(providers or {})
        self.store = store
        self.timeout_s = timeout_s

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(self.functions)

    async def call(self, name: str, argument: str) -> ToolResult:
        if name not in self.functions:
            return ToolResult(
                f"Error: unknown tool {name!r}; available: {', '.join(self.functions)}", "UnknownTool"
            )
        provider = self.providers.get(name, name)
        start = time.perf_counter()
        if self.store is not None and self.store.mode != "record":
            recorded = self.store.get(name, provider, argument)
            if recorded is not None:
                return ToolResult(recorded, None, time.perf_counter() - start, replayed=True)
            if self.store.mode == "replay":
                raise ReplayMiss(f"no recorded {name} result for {argument[:80]!r} (provider {provider})")
        try:
            observation = await asyncio.wait_for(
                asyncio.to_thread(self.functions[name], argument), self.timeout_s
            )
            error = None
        except TimeoutError:
            observation, error = f"Error: {name} timed out after {self.timeout_s:.0f} s", "ToolTimeout"
        except SandboxUnavailable:  # this machine cannot run code at all: no run can react to that
            raise
        except Exception as e:  # a tool failure is an observation the agent can react to
            observation, error = f"Error: {name} failed: {scrub(str(e))}", f"ToolError: {type(e).__name__}"
        if self.store is not None and error is None:
            self.store.put(name, provider, argument, observation)
        return ToolResult(observation, error, time.perf_counter() - start)
