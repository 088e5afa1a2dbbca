"""Content-addressed cache of LLM calls, so a rerun or resumed run replays instead of paying again.

The key is the sha256 of the canonical JSON (:func:`coa.config.canonical_json`) of everything that
determines a reply: endpoint name, base URL, model, messages, the sampling parameters actually sent
(temperature, top_p, max_tokens, seed, stop, extra body fields) and an optional ``sample_id`` that
tells apart otherwise identical requests meant to be independent samples. The API key is never part
of the key nor of the file.

Each entry is one JSON file at ``{root}/{key[:2]}/{key}.json`` (root default:
``{storage_root}/llm-cache``) on any fsspec filesystem (local folder or ``s3://``), holding the
request and the result, every string scrubbed of secrets. It is written under a temporary name and
then moved into place, so a reader never sees a partial entry; an unreadable entry is a miss.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import posixpath
from collections.abc import Mapping
from typing import Any

from coa.config import canonical_json
from coa.io import filesystem, write_atomic
from coa.llm.secrets import Scrubber
from coa.settings import Settings

CACHE_DIR = "llm-cache"
FORMAT_VERSION = 1

log = logging.getLogger("coa.llm.cache")


def cache_key(request: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of a request description."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


class ResponseCache:
    """LLM replies stored by request hash under ``root`` (local path or ``s3://...``)."""

    def __init__(self, root: str | None = None, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        root = root or posixpath.join(self.settings.storage_root.rstrip("/"), CACHE_DIR)
        if "://" not in root:
            root = os.path.abspath(root)
        self.root = root.rstrip("/")
        self._fs, self._path = filesystem(self.root, self.settings)

    def uri(self, key: str) -> str:
        """Where the entry for ``key`` lives."""
        return posixpath.join(self.root, key[:2], f"{key}.json")

    def _file(self, key: str) -> str:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"not a cache key: {key!r}")
        return posixpath.join(self._path, key[:2], f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored result for ``key``, or None (missing or unreadable)."""
        path = self._file(key)
        try:
            with self._fs.open(path, "rb") as fh:
                entry = json.loads(fh.read())
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, ValueError) as e:
            log.warning("LLM cache entry %s is unreadable (%s); treating it as a miss", key, type(e).__name__)
            return None
        if (
            not isinstance(entry, dict)
            or entry.get("key") != key
            or not isinstance(entry.get("result"), dict)
        ):
            log.warning("LLM cache entry %s is not a valid entry; treating it as a miss", key)
            return None
        return dict(entry["result"])

    def put(
        self,
        key: str,
        request: Mapping[str, Any],
        result: Mapping[str, Any],
        scrubber: Scrubber | None = None,
    ) -> str:
        """Store ``result`` (and the ``request`` it answers) atomically; returns the entry's URI."""
        scrubber = scrubber or Scrubber()
        entry = {
            "format": FORMAT_VERSION,
            "key": key,
            "created_at": dt.datetime.now(dt.UTC).isoformat(),
            "request": scrubber.tree(dict(request)),
            "result": scrubber.tree(dict(result)),
        }
        data = json.dumps(entry, ensure_ascii=False, indent=1, sort_keys=True).encode("utf-8")
        write_atomic(self._fs, self._file(key), data)
        return self.uri(key)

    async def aget(self, key: str) -> dict[str, Any] | None:
        """:meth:`get` in a worker thread (object stores are slow; keep the event loop free)."""
        return await asyncio.to_thread(self.get, key)

    async def aput(
        self,
        key: str,
        request: Mapping[str, Any],
        result: Mapping[str, Any],
        scrubber: Scrubber | None = None,
    ) -> str:
        """:meth:`put` in a worker thread."""
        return await asyncio.to_thread(self.put, key, request, result, scrubber)
