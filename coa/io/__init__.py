"""Content-addressed artifact storage on any fsspec filesystem (local folder, ``s3://``).

An artifact is a folder at ``{root}/{kind}/{name}-{key}``, where ``key`` hashes the stage config,
the upstream artifacts' content hashes and the code version. It holds one or more named Parquet
tables (each under a data contract from :mod:`schemas`), optional extra files (reports, models),
``_lineage.json``, and ``_COMMITTED``, the manifest written last:

1. the writer claims the address (on a local root: an ``fcntl`` lock per content key under
   ``{root}/locks/``, which the kernel drops when its process dies), so two identical runs on one
   store build it once: the second waits, then reuses the first one's artifact;
2. it stages every file under ``{root}/.staging/{kind}/{name}-{key}-<uuid>/``, outside the
   artifact folder (a killed writer's staging is never inside a committed artifact);
3. on commit it moves the staged files into place (fsynced on local disks), writes the lineage,
   then the manifest: to a temporary name, flushed and fsynced, renamed, the folder fsynced (on
   S3 one object, written last). The manifest lists every file with its size and sha256;
4. readers open only committed artifacts and only the files the manifest lists, and check each
   file's size and sha256 against it before reading it (hashed once per process, cached by
   path, size and mtime / ETag). A file that differs is an :class:`IntegrityError` naming the
   file and the artifact, and the artifact is moved aside to ``{root}/damaged/`` so the step that
   produced it is rebuilt on the next run. A torn or unreadable manifest reads as uncommitted.

So a crash at any point leaves nothing that looks complete, a committed artifact is reused by the
next run with the same inputs, and an uncommitted one is cleaned up and rebuilt. Stages pass
:class:`ArtifactRef` (URI, tables, content hash), never tables.

The package, by concern: :mod:`coa.io.refs` (addresses, references, errors),
:mod:`coa.io.writer` (store, writer, commit), :mod:`coa.io.integrity` (manifest checks, moving
damaged artifacts aside) and :mod:`coa.io.read` (lookup and readers). Import from ``coa.io``.
"""

from __future__ import annotations

from coa.io.integrity import _MANIFESTS as _MANIFESTS
from coa.io.integrity import _sha256 as _sha256
from coa.io.integrity import move_aside, problems, size_mismatch, verify
from coa.io.read import (
    LINK_EXPIRES_S,
    browser_url,
    file_batches,
    iter_batches,
    local_folder,
    lookup,
    open_artifact,
    path_fingerprint,
    read_file,
    read_lineage,
    read_parquet_file,
    read_table,
)
from coa.io.refs import (
    DAMAGED_DIR,
    LINEAGE,
    LOCKS_DIR,
    MANIFEST,
    ROW_GROUP_ROWS,
    STAGING_DIR,
    STAGING_PREFIX,
    ArtifactError,
    ArtifactRef,
    IntegrityError,
    StorageFull,
    StorageUnavailable,
    TableInfo,
    artifact_key,
    filesystem,
    is_disk_full,
    join,
    storage_failure,
)
from coa.io.writer import ArtifactWriter, Store, write_atomic

__all__ = [
    "LINK_EXPIRES_S",
    "DAMAGED_DIR",
    "LINEAGE",
    "LOCKS_DIR",
    "MANIFEST",
    "ROW_GROUP_ROWS",
    "STAGING_DIR",
    "STAGING_PREFIX",
    "ArtifactError",
    "ArtifactRef",
    "ArtifactWriter",
    "browser_url",
    "IntegrityError",
    "StorageFull",
    "StorageUnavailable",
    "Store",
    "TableInfo",
    "artifact_key",
    "file_batches",
    "filesystem",
    "is_disk_full",
    "iter_batches",
    "join",
    "local_folder",
    "lookup",
    "move_aside",
    "open_artifact",
    "path_fingerprint",
    "problems",
    "read_file",
    "read_lineage",
    "read_parquet_file",
    "read_table",
    "size_mismatch",
    "storage_failure",
    "verify",
    "write_atomic",
]
