"""The HTTP side of the LLM client: responses, what is retried and after how long, proxies, errors.

:class:`HTTPResponse` is a reply as the client reads it (status, headers, raw body); a retryable
failure is raised inside an attempt as :class:`Retryable` (with the server's ``Retry-After`` when it
gave one, :func:`parse_retry_after`); :func:`is_context_length_error` recognises a prompt that is too
long in an error body; :func:`env_proxy` / :func:`proxy_and_auth` read the proxy once, credentials
apart; :func:`public_url` and :func:`error_detail` give the URL and error text that may be logged
(scrubbed by the caller). :mod:`coa.llm.client` is the client that uses them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email.utils
import json
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

import aiohttp

from coa.llm.secrets import Scrubber

RETRY_STATUSES = frozenset({408, 409, 425, 429})
CONTEXT_LENGTH_STATUSES = frozenset({400, 413, 422})
CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "context length",
    "maximum context",
    "context window",
    "prompt is too long",
)
RETRYABLE_TRANSPORT = (
    aiohttp.ClientConnectionError,  # refused, reset, server disconnected, OS errors
    aiohttp.ClientPayloadError,  # body cut short or undecodable
    aiohttp.ClientResponseError,  # malformed status line or headers
)
SNIPPET = 300


@dataclasses.dataclass(frozen=True)
class HTTPResponse:
    """What one HTTP attempt returned: status, headers (lower-cased names) and the raw body."""

    status_code: int
    reason_phrase: str
    headers: dict[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (``ValueError`` if it is not)."""
        return json.loads(self.content)


class Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def parse_retry_after(headers: Mapping[str, str], now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), or None."""
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None or not raw.strip():
        return None
    try:
        seconds = float(raw)
        return seconds if seconds >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def is_context_length_error(text: str) -> bool:
    """Whether an error body says the prompt does not fit the model's context."""
    lowered = text.lower()
    return any(marker in lowered for marker in CONTEXT_LENGTH_MARKERS)


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTP(S)_PROXY`` unless ``NO_PROXY`` matches).

    Read once per client: aiohttp's own ``trust_env`` looks the proxy and ``.netrc`` up in worker
    threads on every request (two thread hops a call, which queue at 64 calls in flight).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme) or None


def proxy_and_auth(proxy: str | None, scrubber: Scrubber) -> tuple[str | None, aiohttp.BasicAuth | None]:
    """A proxy URL without its user info, and that user info as basic auth (its password scrubbed)."""
    if not proxy:
        return None, None
    parts = urllib.parse.urlsplit(proxy)
    if parts.username is None:
        return proxy, None
    password = urllib.parse.unquote(parts.password or "")
    scrubber.add(password, parts.password)
    auth = aiohttp.BasicAuth(urllib.parse.unquote(parts.username), password)
    return public_url(proxy), auth


def public_url(url: str) -> str:
    """``url`` without user info, query or fragment (what may be stored and logged)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


def error_detail(response: HTTPResponse) -> str:
    """A short human-readable reason from an error response (JSON ``error.message`` or the text)."""
    return error_detail_full(response)[: 2 * SNIPPET]


def error_detail_full(response: HTTPResponse) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:SNIPPET].strip() or response.reason_phrase
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or json.dumps(err)[:SNIPPET]
            code = err.get("code") or err.get("type")
            return f"{msg} (code: {code})" if code else str(msg)
        return str(err)[:SNIPPET]
    return json.dumps(data)[:SNIPPET]
