"""Integrity of committed artifacts: each file's size and sha256 against the manifest (hashed once
per process, cached by path, size and mtime / ETag), and damaged artifacts moved aside."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import fsspec

from coa.io.refs import (
    DAMAGED_DIR,
    MANIFEST,
    ArtifactError,
    ArtifactRef,
    IntegrityError,
    _is_local,
    filesystem,
)
from coa.settings import Settings

log = logging.getLogger("coa.io")  # the package's logger, as before the split

_MANIFESTS: dict[tuple[str, str], Mapping[str, Any]] = {}
"""(artifact URI, content hash) -> its manifest, as read in this process."""
_DIGESTS: dict[tuple[str, int, str], str] = {}
"""(file path, size, mtime_ns or ETag) -> sha256, hashed in this process."""


def verify(ref: ArtifactRef, settings: Settings | None = None, files: Sequence[str] | None = None) -> None:
    """Check ``files`` of a committed artifact (default: all) against its manifest's sizes and sha256s.

    Each file is hashed once per process (cached by path, size and mtime, or ETag on S3). A file
    that is missing or differs moves the artifact aside to ``{root}/damaged/`` and raises
    :class:`IntegrityError` naming the file and the artifact: the next run rebuilds it."""
    fs, path = filesystem(ref.uri, settings)
    manifest = _manifest(ref, fs, path)
    digests: Mapping[str, str] = manifest.get("files", {})
    sizes: Mapping[str, int] = manifest.get("sizes", {})
    for rel in files if files is not None else sorted(digests):
        if rel not in digests:
            continue
        full = posixpath.join(path, rel)
        try:
            size, digest = _file_digest(fs, full, sizes.get(rel))
        except FileNotFoundError:
            problem = "is missing"
        else:
            if rel in sizes and size != sizes[rel]:
                problem = f"has {size} bytes, the manifest says {sizes[rel]}"
            elif digest != digests[rel]:
                problem = f"has sha256 {digest[:12]}…, the manifest says {digests[rel][:12]}…"
            else:
                continue
        dest = move_aside(ref.uri, settings)
        where = f"moved aside to {dest}" if dest else "it could not be moved aside"
        raise IntegrityError(
            f"file {rel} of artifact {ref.uri} {problem}: the artifact was damaged after its commit; "
            f"{where}; rerun the step that produced it to rebuild it"
        )


def size_mismatch(ref: ArtifactRef, settings: Settings | None = None) -> str | None:
    """The first file of ``ref`` that is missing or not the size its manifest says (no hashing: what a
    dry run can afford), or None."""
    fs, path = filesystem(ref.uri, settings)
    sizes: Mapping[str, int] = _manifest(ref, fs, path).get("sizes", {})
    for rel, size in sorted(sizes.items()):
        try:
            if int(fs.size(posixpath.join(path, rel))) != size:
                return rel
        except FileNotFoundError:
            return rel
    return None


def problems(ref: ArtifactRef, settings: Settings | None = None) -> dict[str, str]:
    """File -> what differs from the manifest, for every file of ``ref`` (``coa validate``; moves nothing)."""
    fs, path = filesystem(ref.uri, settings)
    manifest = _manifest(ref, fs, path)
    sizes: Mapping[str, int] = manifest.get("sizes", {})
    out = {}
    for rel, expected in sorted(manifest.get("files", {}).items()):
        try:
            size, digest = _file_digest(fs, posixpath.join(path, rel), sizes.get(rel))
        except FileNotFoundError:
            out[rel] = "missing"
            continue
        if rel in sizes and size != sizes[rel]:
            out[rel] = f"{size} bytes, the manifest says {sizes[rel]} (file changed after commit)"
        elif digest != expected:
            out[rel] = "content hash differs from the manifest (file changed after commit)"
    return out


def move_aside(uri: str, settings: Settings | None = None) -> str | None:
    """Move a damaged artifact folder to ``{root}/damaged/{kind}/{name}-{key}-<time>``; its new
    address, or None when it is already gone (another process moved it)."""
    fs, path = filesystem(uri, settings)
    kind = posixpath.basename(posixpath.dirname(path))
    root = posixpath.dirname(posixpath.dirname(path))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
    dest = posixpath.join(root, DAMAGED_DIR, kind, f"{posixpath.basename(path)}-{stamp}")
    try:
        fs.makedirs(posixpath.dirname(dest), exist_ok=True)
        if _is_local(fs):
            os.rename(path, dest)
        else:  # object by object, the manifest first: the artifact reads as uncommitted at once
            files = sorted(fs.find(path), key=lambda f: not f.endswith(f"/{MANIFEST}"))
            for f in files:
                fs.mv(f, posixpath.join(dest, posixpath.relpath(f, path)))
    except FileNotFoundError:
        return None
    except OSError as e:
        log.warning("could not move the damaged artifact %s aside: %s", uri, e)
        return None
    prefix = uri.split("://", 1)[0] + "://" if "://" in uri else ""
    return prefix + dest if prefix and not dest.startswith(prefix) else dest


def _manifest(ref: ArtifactRef, fs: fsspec.AbstractFileSystem, path: str) -> Mapping[str, Any]:
    cached = _MANIFESTS.get((ref.uri, ref.content_hash))
    if cached is not None:
        return cached
    try:
        with fs.open(posixpath.join(path, MANIFEST), "rb") as fh:
            manifest = json.loads(fh.read())
    except (FileNotFoundError, ValueError) as e:
        raise ArtifactError(
            f"artifact {ref.uri} is no longer committed ({MANIFEST} missing or torn): rerun the step "
            "that produced it"
        ) from e
    if manifest.get("content_hash") != ref.content_hash:
        raise ArtifactError(
            f"artifact {ref.uri} was rebuilt with other content after this reference was taken: rerun"
        )
    _MANIFESTS[(ref.uri, ref.content_hash)] = manifest
    return dict(manifest)


def _file_digest(fs: fsspec.AbstractFileSystem, path: str, expected_size: int | None) -> tuple[int, str]:
    """(size, sha256) of a file; the hash is cached by (path, size, mtime / ETag) and skipped when
    the size already differs from ``expected_size``."""
    if _is_local(fs):
        st = os.stat(path)
        size, stamp = st.st_size, f"{st.st_mtime_ns}:{st.st_ino}"
    else:
        info = fs.info(path)
        size = int(info["size"])
        stamp = str(info.get("ETag") or info.get("LastModified") or info.get("mtime") or "")
    if expected_size is not None and size != expected_size:
        return size, ""
    key = (path, size, stamp)
    digest = _DIGESTS.get(key) if stamp else None
    if digest is None:
        digest = _sha256(fs, path)
        if stamp:
            _DIGESTS[key] = digest
    return size, digest


def _sha256(fs: fsspec.AbstractFileSystem, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
