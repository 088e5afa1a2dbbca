"""Artifact addresses and references: the storage layout's names, :class:`ArtifactRef` and
:class:`TableInfo`, the artifact errors, content keys, and the fsspec filesystem of a URI."""

from __future__ import annotations

import errno
import hashlib
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import fsspec
from pydantic import BaseModel, ConfigDict

from coa.config import canonical_json
from coa.errors import CheckFailed, InfraError, UserError
from coa.settings import Settings

MANIFEST = "_COMMITTED"
LINEAGE = "_lineage.json"
STAGING_PREFIX = ".staging-"
ROW_GROUP_ROWS = 10_000
STAGING_DIR = ".staging"
"""Under the storage root: every writer's staging folder (``{kind}/{name}-{key}-<uuid>``)."""
LOCKS_DIR = "locks"
"""Under the storage root: one lock file per content key (local roots only)."""
DAMAGED_DIR = "damaged"
"""Under the storage root: artifacts moved aside because a file differs from their manifest."""


class ArtifactError(UserError, RuntimeError):
    """An artifact is missing, uncommitted or unreadable; the message says which and how to fix it."""


class IntegrityError(ArtifactError, CheckFailed):
    """A committed artifact's file differs from its manifest (size or sha256): damaged after commit."""

    exit_code = 1
    kind = "integrity check failed"


class StorageFull(InfraError, OSError):
    """No space left on the storage device while writing (ENOSPC): nothing was committed."""


class StorageUnavailable(InfraError, OSError):
    """The storage service failed a request after the client's retries (an S3 HTTP 5xx, throttling,
    a lost connection): what the step was writing is not committed; rerun once the service answers."""


_STORAGE_CLIENTS = frozenset({"botocore", "aiobotocore", "s3fs"})
"""Packages whose errors come from a storage request (aiohttp is left out: the LLM clients use it too)."""


def storage_failure(error: BaseException) -> str | None:
    """What the storage service answered, when ``error`` is (or wraps) a failed request of its client
    (botocore / s3fs: ``InternalError (HTTP 500) after 5 attempts``); None for any other error."""
    seen: BaseException | None = error
    while seen is not None:
        if type(seen).__module__.split(".")[0] in _STORAGE_CLIENTS:
            response = getattr(seen, "response", None)
            if not isinstance(response, Mapping):
                return " ".join(f"{type(seen).__name__}: {seen}".split())
            code = response.get("Error", {}).get("Code") or "error"
            meta = response.get("ResponseMetadata", {})
            status = meta.get("HTTPStatusCode")
            attempts = int(meta.get("RetryAttempts") or 0) + 1
            said = f"HTTP {status}" if str(status) == code else f"{code} (HTTP {status})" if status else code
            return f"{said} after {attempts} attempt{'s' if attempts > 1 else ''}"
        seen = seen.__cause__ or seen.__context__
    return None


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or what it wraps) is ENOSPC; pyarrow re-raises it as a plain OSError."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and (
            seen.errno == errno.ENOSPC or "No space left on device" in str(seen)
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class TableInfo(BaseModel):
    """One named table inside an artifact."""

    model_config = ConfigDict(frozen=True)
    schema_id: str
    rows: int
    files: tuple[str, ...]


class ArtifactRef(BaseModel):
    """A small, serialisable reference to a committed artifact: what stages pass to each other."""

    model_config = ConfigDict(frozen=True)
    uri: str
    kind: str
    name: str
    key: str
    content_hash: str
    tables: dict[str, TableInfo]
    primary: str | None = None
    files: tuple[str, ...] = ()

    def rows(self, table: str | None = None) -> int:
        return self.tables[table or self.primary_table].rows

    @property
    def primary_table(self) -> str:
        """The first table written (e.g. ``tasks`` before ``quarantine``)."""
        if self.primary is None:
            raise ArtifactError(f"{self.uri} holds no tables")
        return self.primary


def filesystem(uri: str, settings: Settings | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for ``uri`` and the path within it."""
    settings = settings or Settings.from_env()
    fs, path = fsspec.core.url_to_fs(uri, **settings.storage_options(uri))
    return fs, path.rstrip("/")


def join(uri: str, *parts: str) -> str:
    return posixpath.join(uri.rstrip("/"), *parts)


def artifact_key(kind: str, name: str, config: Any, upstream: Sequence[ArtifactRef], version: str) -> str:
    """Hash of everything that determines an artifact's content."""
    payload = {
        "kind": kind,
        "name": name,
        "config": config,
        "upstream": sorted(u.content_hash for u in upstream),
        "code_version": version,
    }
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:16]


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def _table_info(ref: ArtifactRef, name: str) -> TableInfo:
    if name not in ref.tables:
        raise ArtifactError(f"{ref.uri} has no table {name!r}; tables: {', '.join(ref.tables) or 'none'}")
    return ref.tables[name]


def _ref_from_manifest(uri: str, manifest: Mapping[str, Any]) -> ArtifactRef:
    return ArtifactRef(
        uri=uri,
        kind=manifest["kind"],
        name=manifest["name"],
        key=manifest["key"],
        content_hash=manifest["content_hash"],
        tables={k: TableInfo(**v) for k, v in manifest["tables"].items()},
        primary=manifest.get("primary"),
        files=tuple(manifest["files"]),
    )
