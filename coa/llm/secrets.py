"""API keys: where they come from and how they are kept out of logs, caches, results and errors.

A key is read from the environment variable an endpoint names (``api_key_env``) or from a named secret
block (``api_key_block``). :mod:`coa` reads environment variables only; the block is read by the reader
the orchestration layer installs with :func:`set_secret_block_reader`
(:mod:`tasks.secret_blocks` installs Prefect's Secret block lookup when :mod:`tasks` is
imported, and the ``coa`` CLI installs it lazily), so
:mod:`coa` imports no Prefect. It is only ever placed in the ``Authorization`` header. Every string the
LLM layer logs, raises or stores goes through :class:`Scrubber`, which masks what
:func:`coa.settings.scrub` does (secret-looking environment values) and also masks the endpoint's own
key, whatever its variable is called or wherever it came from. The environment's secret values are read
once and re-read at most every ``env_refresh_s`` (1 s): scanning the whole environment on every string
cost ~0.12 ms a call, a quarter of the client's CPU per call; a secret exported while a client runs is
masked within that interval, the endpoint's own key always.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from coa.config import ConfigError
from coa.llm.config import EndpointConfig
from coa.settings import scrub, secret_values

MASK = "***"
_MIN_SECRET_LEN = 4

SecretBlockReader = Callable[[str], Awaitable[Any]]
"""Reads the value held by a named secret block (``api_key_block``): a non-empty string is a key."""

_block_reader: SecretBlockReader | None = None


def set_secret_block_reader(reader: SecretBlockReader | None) -> SecretBlockReader | None:
    """Install how ``api_key_block`` names are read (``None``: none); returns the reader it replaces."""
    global _block_reader
    previous, _block_reader = _block_reader, reader
    return previous


def secret_block_reader() -> SecretBlockReader | None:
    """The installed reader of ``api_key_block`` names, or ``None`` (only env vars can be read)."""
    return _block_reader


class Scrubber:
    """Masks secret values in text and in JSON-like trees (strings only; keys and numbers are kept)."""

    def __init__(self, secrets: Iterable[str | None] = (), env_refresh_s: float = 1.0) -> None:
        self._secrets: list[str] = []
        self._env_refresh_s = env_refresh_s
        self._env: list[str] = []
        self._env_read_at = -math.inf
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        for s in secrets:
            if s and len(s) >= _MIN_SECRET_LEN and s not in self._secrets:
                self._secrets.append(s)
        self._secrets.sort(key=len, reverse=True)

    def _env_secrets(self) -> list[str]:
        """Secret-looking environment values (as :func:`coa.settings.scrub` masks), re-read when stale."""
        now = time.monotonic()
        if now - self._env_read_at >= self._env_refresh_s:
            self._env, self._env_read_at = secret_values(), now
        return self._env

    def text(self, value: str) -> str:
        if not value:
            return value
        for s in self._env_secrets():
            value = value.replace(s, MASK)
        for s in self._secrets:
            value = value.replace(s, MASK)
        return value

    def tree(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {str(k): self.tree(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.tree(v) for v in value]
        return value


async def resolve_api_key(endpoint: EndpointConfig) -> str | None:
    """The endpoint's API key, or None when it needs none. Errors name the source, never the value."""
    if endpoint.api_key_env:
        key = os.environ.get(endpoint.api_key_env, "").strip()
        if not key:
            raise ConfigError(
                f"endpoint {endpoint.name!r}: environment variable {endpoint.api_key_env} "
                "(api_key_env) is not set"
            )
        return key
    if endpoint.api_key_block:
        reader = _block_reader
        if reader is None:
            raise ConfigError(
                f"endpoint {endpoint.name!r}: api_key_block {endpoint.api_key_block!r} is read by the "
                "Prefect layer, which this process has not loaded; run through the pipeline's flows or "
                "the coa CLI, or name an environment variable instead (api_key_env)"
            )
        try:
            value: Any = await reader(endpoint.api_key_block)
        except Exception as e:  # re-raised with a clean, scrubbed message
            raise ConfigError(
                f"endpoint {endpoint.name!r}: cannot load Prefect Secret block "
                f"{endpoint.api_key_block!r}: {scrub(type(e).__name__ + ': ' + str(e))}"
            ) from None
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f"endpoint {endpoint.name!r}: Prefect Secret block {endpoint.api_key_block!r} "
                "does not hold a non-empty string"
            )
        return value.strip()
    return None
