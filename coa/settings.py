"""Infrastructure settings, read from environment variables only.

Pipeline behaviour lives in :mod:`coa.config`; where things run lives here:

- ``COA_STORAGE_ROOT``: where artifacts go: a local folder (default ``.coa/store``) or ``s3://bucket/prefix``.
- ``COA_S3_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL``): an S3-compatible endpoint (MinIO, moto, …);
  credentials come from the usual ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / profile chain.
- ``COA_S3_MAX_ATTEMPTS``: how many times one S3 request is tried (botocore's "standard" retry mode:
  HTTP 500/502/503/504 and throttling such as ``SlowDown`` are retried with jittered backoff), default 5.
- LLM base URLs and API keys and ``PREFECT_API_URL`` are read by the components that use them.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from coa.errors import UserError

DEFAULT_STORAGE_ROOT = ".coa/store"
_SECRET_NAME = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL)", re.IGNORECASE)
_SECRET_WORDS = {"apikey", "secret", "secrets", "token", "password", "passwd", "credential", "credentials"}
_NOT_SECRET_SUFFIXES = ("env", "name", "names", "file", "path", "id")


def _secret_field(name: str) -> bool:
    """Whether a config/lineage field holds a secret *value*.

    ``api_key``, ``auth_token``, ``password`` do; the artifact ``key``, token counts (``max_tokens``)
    and the *names* of variables or files holding a secret (``api_key_env``) do not.
    """
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if not words or words[-1] in _NOT_SECRET_SUFFIXES:
        return False
    if words[-1] == "key":
        return len(words) > 1 and words[-2] in {"api", "access", "secret", "private", "auth"}
    return words[-1] in _SECRET_WORDS or any(w in _SECRET_WORDS - {"token"} for w in words)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where artifacts live and how to reach them."""

    storage_root: str = DEFAULT_STORAGE_ROOT
    s3_endpoint_url: str | None = None
    s3_max_attempts: int = 5
    """Attempts per S3 request (the first try included) before the error reaches the step."""

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            storage_root=os.environ.get("COA_STORAGE_ROOT") or DEFAULT_STORAGE_ROOT,
            s3_endpoint_url=os.environ.get("COA_S3_ENDPOINT_URL")
            or os.environ.get("AWS_ENDPOINT_URL")
            or None,
            s3_max_attempts=_attempts(os.environ.get("COA_S3_MAX_ATTEMPTS") or "5"),
        )

    def storage_options(self, uri: str) -> dict[str, Any]:
        """fsspec options for ``uri`` (only S3 needs any)."""
        if not uri.startswith(("s3://", "s3a://")):
            return {}
        options: dict[str, Any] = {
            "config_kwargs": {"retries": {"mode": "standard", "total_max_attempts": self.s3_max_attempts}}
        }
        if self.s3_endpoint_url:
            options["client_kwargs"] = {"endpoint_url": self.s3_endpoint_url}
        return options


def _attempts(value: str) -> int:
    if not value.strip().isdigit() or int(value) < 1:
        raise UserError(f"COA_S3_MAX_ATTEMPTS must be a whole number of at least 1, got {value!r}")
    return int(value)


def secret_values() -> list[str]:
    """Values of environment variables whose names look secret (for scrubbing text)."""
    return sorted(
        (v for k, v in os.environ.items() if _SECRET_NAME.search(k) and v and len(v) >= 6),
        key=len,
        reverse=True,
    )


def scrub(text: str) -> str:
    """Replace any secret environment value occurring in ``text`` with ``***``."""
    for value in secret_values():
        text = text.replace(value, "***")
    return text


def redact(value: Any) -> Any:
    """Copy of a JSON-like value with secret-looking keys masked and secret env values scrubbed."""
    if isinstance(value, dict):
        return {k: ("***" if _secret_field(str(k)) and v else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value
