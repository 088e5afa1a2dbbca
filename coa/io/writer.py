"""Writing artifacts: the :class:`Store` (content addresses) and the :class:`ArtifactWriter`
(claim, stage, commit with the manifest last), and the crash-safe file helpers."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import pathlib
import posixpath
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from coa.config import canonical_json
from coa.io.integrity import _DIGESTS, _sha256, verify
from coa.io.read import lookup
from coa.io.refs import (
    LINEAGE,
    LOCKS_DIR,
    MANIFEST,
    ROW_GROUP_ROWS,
    STAGING_DIR,
    ArtifactError,
    ArtifactRef,
    _is_local,
    _ref_from_manifest,
    artifact_key,
    filesystem,
    join,
)
from coa.settings import Settings, redact
from coa.version import code_version
from schemas import Contract

log = logging.getLogger("coa.io")  # the package's logger, as before the split


class Store:
    """Artifacts under one storage root (local path or ``s3://bucket/prefix``)."""

    def __init__(self, root: str | None = None, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.from_env()
        root = root or self.settings.storage_root
        if "://" not in root:
            import os

            root = os.path.abspath(root)
        self.root = root.rstrip("/")

    def address(
        self,
        kind: str,
        name: str,
        config: Any,
        upstream: Sequence[ArtifactRef] = (),
        version: str | None = None,
    ) -> tuple[str, str]:
        """The content-addressed URI for an artifact, and its key."""
        key = artifact_key(kind, name, config, upstream, version or code_version())
        return join(self.root, kind, f"{name}-{key}"), key

    def checkpoint_uri(self, artifact_uri: str) -> str:
        """Where a stage checkpoints an artifact in progress (stable across reruns, removed on commit)."""
        return join(self.root, "checkpoints", *artifact_uri.rstrip("/").split("/")[-2:])

    def writer(
        self,
        kind: str,
        name: str,
        config: Any,
        upstream: Sequence[ArtifactRef] = (),
        extra_lineage: Mapping[str, Any] | None = None,
        version: str | None = None,
    ) -> ArtifactWriter:
        """A writer at the content address of (kind, name, config, upstream, code version);
        ``version``: the code version the key hashes (a step's own, :meth:`coa.steps.Stage.code_version`;
        default: the whole source's). The lineage records the whole source's code version either way."""
        version = version or code_version()
        uri, key = self.address(kind, name, config, upstream, version)
        return ArtifactWriter(uri, kind, name, key, config, upstream, extra_lineage, self.settings)


class ArtifactWriter:
    """Stages files for one artifact and commits them atomically (manifest last).

    Use :meth:`existing` first: a committed artifact at the same address is returned as-is. On a
    local root the writer holds the address's lock from its first write (or from :meth:`claim`)
    until it commits or aborts, so a second identical writer waits, then finds it committed.
    """

    def __init__(
        self,
        uri: str,
        kind: str,
        name: str,
        key: str,
        config: Any = None,
        upstream: Sequence[ArtifactRef] = (),
        extra_lineage: Mapping[str, Any] | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.uri, self.kind, self.name, self.key = uri.rstrip("/"), kind, name, key
        self.settings = settings or Settings.from_env()
        self.fs, self.path = filesystem(self.uri, self.settings)
        self.config, self.upstream = config, tuple(upstream)
        self.extra_lineage = dict(extra_lineage or {})
        self.root = posixpath.dirname(posixpath.dirname(self.path))
        self.folder = posixpath.basename(self.path)
        self.staging = posixpath.join(
            self.root,
            STAGING_DIR,
            posixpath.basename(posixpath.dirname(self.path)),
            f"{self.folder}-{uuid.uuid4().hex[:12]}",
        )
        self._tables: dict[str, dict[str, Any]] = {}
        self._order: list[str] = []
        self._files: list[str] = []
        self._started = False
        self._committed: ArtifactRef | None = None
        self._lock: Any = None
        self._claims = 0  # open claim() blocks: commit and abort keep the lock until the last one ends

    @property
    def tables(self) -> dict[str, dict[str, Any]]:
        """The tables staged so far: name -> ``{schema_id, rows, files}``."""
        return {k: dict(v) for k, v in self._tables.items()}

    @property
    def local(self) -> bool:
        return _is_local(self.fs)

    # -- reuse ------------------------------------------------------------------------------
    def existing(self) -> ArtifactRef | None:
        """The committed artifact at this address, checked against its manifest; None if there is none.

        A damaged one (a file differs from the manifest) is moved aside and raises
        :class:`IntegrityError`: the next run rebuilds it."""
        ref = lookup(self.uri, self.settings)
        if ref is not None:
            verify(ref, self.settings)
        return ref

    @contextlib.contextmanager
    def claim(self) -> Iterator[None]:
        """Hold this address's lock (local roots; a no-op elsewhere) for a whole build: an identical
        run started meanwhile waits here, then reuses what this one committed.

        Inside a claim, :meth:`commit` and :meth:`abort` keep the lock: what the caller does after
        them (a failure marker written, a stale one removed) happens before an identical run waiting
        here can look, so it never sees "no failure and no artifact" in between."""
        self._acquire()
        self._claims += 1
        try:
            yield
        finally:
            self._claims -= 1
            if self._claims == 0:
                self._release()

    def _acquire(self) -> None:
        if self._lock is not None or not self.local:
            return
        import fcntl

        lock_path = os.path.join(self.root, LOCKS_DIR, posixpath.basename(posixpath.dirname(self.path)))
        os.makedirs(lock_path, exist_ok=True)
        fh = open(os.path.join(lock_path, f"{self.folder}.lock"), "a+b")  # noqa: SIM115 (held open)
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("%s is being built by another run: waiting for it to finish", self.uri)
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        self._lock = fh

    def _done(self) -> None:
        """The build is over (committed or aborted): drop the lock unless a claim() still holds it."""
        if self._claims == 0:
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file drops the flock
            self._lock = None

    # -- staging ----------------------------------------------------------------------------
    def _start(self) -> None:
        if self._started:
            return
        self._acquire()
        if lookup(self.uri, self.settings) is not None:
            self._done()
            raise ArtifactError(
                f"{self.uri} is already committed (by another run): nothing to write; rerun to reuse it"
            )
        if self.local:  # we hold the lock: whatever is here was left by a dead writer, never committed
            self._clear_leftovers()
        self.fs.makedirs(self.staging, exist_ok=True)
        self._started = True

    def _clear_leftovers(self) -> None:
        if self.fs.exists(self.path):
            self.fs.rm(self.path, recursive=True)
        parent = posixpath.dirname(self.staging)
        if self.fs.exists(parent):
            for old in self.fs.ls(parent, detail=False):
                if posixpath.basename(old.rstrip("/")).startswith(f"{self.folder}-"):
                    self.fs.rm(old, recursive=True)

    def write_table(self, table_name: str, table: pa.Table, contract: Contract) -> int:
        """Write a whole table (checked against ``contract``)."""
        with self.table_writer(table_name, contract) as write:
            write(table)
        return int(self._tables[table_name]["rows"])

    @contextlib.contextmanager
    def table_writer(self, table_name: str, contract: Contract) -> Iterator[Any]:
        """Stream batches into one Parquet file; yields ``write(table_or_batch)``."""
        self._start()
        if table_name in self._order:
            raise ArtifactError(f"table {table_name!r} written twice to {self.uri}")
        rel = f"{table_name}.parquet"
        rows = 0
        self._order.append(table_name)  # tables keep the order they were opened in (the first is primary)
        with self.fs.open(posixpath.join(self.staging, rel), "wb") as fh:
            writer = pq.ParquetWriter(fh, contract.schema, compression="zstd")
            try:

                def write(data: pa.Table | pa.RecordBatch) -> None:
                    nonlocal rows
                    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
                    table = contract.conform(table)
                    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                    rows += table.num_rows

                yield write
            finally:
                writer.close()
        self._tables[table_name] = {"schema_id": contract.id, "rows": rows, "files": [rel]}
        self._tables = {name: self._tables[name] for name in self._order if name in self._tables}
        self._files.append(rel)

    def write_file(self, relpath: str, data: bytes | str) -> str:
        """Stage an extra file (report, plot, model weights…) under ``relpath``."""
        self._start()
        if relpath.startswith((".", "_")) or ".." in relpath.split("/"):
            raise ArtifactError(f"invalid artifact file name {relpath!r}")
        target = posixpath.join(self.staging, relpath)
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        with self.fs.open(target, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        self._files.append(relpath)
        return join(self.uri, relpath)

    def put_file(self, relpath: str, local_path: str | os.PathLike[str]) -> str:
        """Stage a local file under ``relpath`` without reading it into memory (model weights)."""
        self._start()
        if relpath.startswith((".", "_")) or ".." in relpath.split("/"):
            raise ArtifactError(f"invalid artifact file name {relpath!r}")
        target = posixpath.join(self.staging, relpath)
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        self.fs.put_file(os.fspath(local_path), target)
        self._files.append(relpath)
        return join(self.uri, relpath)

    def put_folder(self, prefix: str, local_dir: str | os.PathLike[str]) -> list[str]:
        """Stage every file under ``local_dir`` as ``prefix/<relative path>``; return the relpaths."""
        root = pathlib.Path(local_dir)
        staged = []
        for path in sorted(q for q in root.rglob("*") if q.is_file()):
            rel = posixpath.join(prefix, path.relative_to(root).as_posix())
            self.put_file(rel, path)
            staged.append(rel)
        return staged

    def staged_path(self, relpath: str) -> str:
        """Local path to stage a file written by another library (local filesystems only)."""
        self._start()
        if self.fs.protocol not in ("file", ("file", "local")) and "file" not in self.fs.protocol:
            raise ArtifactError("staged_path() needs a local storage root; use write_file() for remote roots")
        target = posixpath.join(self.staging, relpath)
        self.fs.makedirs(posixpath.dirname(target), exist_ok=True)
        self._files.append(relpath)
        return target

    # -- commit -----------------------------------------------------------------------------
    def commit(self) -> ArtifactRef:
        """Move staged files into place, write lineage, then the manifest (the commit point).

        On a remote root, an artifact another writer committed meanwhile wins: this writer's
        staging is dropped and the winner's reference is returned (same key, same inputs)."""
        if self._committed is not None:
            return self._committed
        self._start()
        try:
            self._committed = self._commit()
        finally:
            self._done()
        return self._committed

    def _commit(self) -> ArtifactRef:
        if not self.local:
            winner = lookup(self.uri, self.settings)
            if winner is not None:
                self.abort()
                return winner
            if self.fs.exists(self.path):  # a killed writer's partial commit: never committed
                self.fs.rm(self.path, recursive=True)
        digests: dict[str, str] = {}
        sizes: dict[str, int] = {}
        for rel in sorted(set(self._files)):
            src, dst = posixpath.join(self.staging, rel), posixpath.join(self.path, rel)
            digests[rel] = _sha256(self.fs, src)
            sizes[rel] = int(self.fs.size(src))
            if self.local:
                _fsync_file(src)
            self.fs.makedirs(posixpath.dirname(dst), exist_ok=True)
            self.fs.mv(src, dst)
            if self.local:  # a rename keeps size and mtime: this process need not hash it again
                st = os.stat(dst)
                _DIGESTS[(dst, st.st_size, f"{st.st_mtime_ns}:{st.st_ino}")] = digests[rel]
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self.staging, recursive=True)
        content_hash = hashlib.sha256(canonical_json(digests).encode()).hexdigest()
        now = dt.datetime.now(dt.UTC).isoformat()
        lineage = redact(
            {
                "artifact": self.uri,
                "kind": self.kind,
                "name": self.name,
                "key": self.key,
                "content_hash": content_hash,
                "code_version": code_version(),
                "created_at": now,
                "config": self.config,
                "upstream": [
                    {"uri": u.uri, "kind": u.kind, "content_hash": u.content_hash, "tables": list(u.tables)}
                    for u in self.upstream
                ],
                "tables": {
                    k: {"schema_id": v["schema_id"], "rows": v["rows"]} for k, v in self._tables.items()
                },
                **self.extra_lineage,
            }
        )
        self.fs.makedirs(self.path, exist_ok=True)
        _write_json(self.fs, posixpath.join(self.path, LINEAGE), lineage)
        manifest = {
            "uri": self.uri,
            "kind": self.kind,
            "name": self.name,
            "key": self.key,
            "content_hash": content_hash,
            "created_at": now,
            "tables": self._tables,
            "primary": next(iter(self._tables), None),
            "files": digests,
            "sizes": sizes,
        }
        if self.local:  # every folder the files went into is durable before the commit point
            for folder in sorted({posixpath.dirname(posixpath.join(self.path, r)) for r in digests}):
                _fsync_dir(folder)
        _write_json(self.fs, posixpath.join(self.path, MANIFEST), manifest)
        return _ref_from_manifest(self.uri, manifest)

    def abort(self) -> None:
        """Remove staged files (the artifact stays uncommitted) and let an identical run go ahead."""
        try:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(self.staging, recursive=True)
        finally:
            self._done()

    def __enter__(self) -> ArtifactWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    @property
    def ref(self) -> ArtifactRef:
        if self._committed is None:
            raise ArtifactError(f"{self.uri} is not committed yet")
        return self._committed


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on a directory
        _fsync_file(path)


def write_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` under a temporary name, then move it into place.

    Readers see either the old file, nothing, or the whole new file; a failed write leaves no
    temporary file behind (best effort).
    """
    folder = posixpath.dirname(path)
    tmp = posixpath.join(folder, f".tmp-{uuid.uuid4().hex}-{posixpath.basename(path)}")
    fs.makedirs(folder, exist_ok=True)
    try:
        with fs.open(tmp, "wb") as fh:
            fh.write(data)
        fs.mv(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            if fs.exists(tmp):
                fs.rm(tmp)
        raise


def _write_json(fs: fsspec.AbstractFileSystem, path: str, value: Any) -> None:
    """Write JSON crash-safely: on a local disk to a temporary name, flushed and fsynced, renamed
    over ``path``, the folder fsynced; on an object store as one object (a put is atomic)."""
    data = json.dumps(value, indent=2, sort_keys=True, default=str).encode()
    if not _is_local(fs):
        with fs.open(path, "wb") as fh:
            fh.write(data)
        return
    folder = posixpath.dirname(path)
    tmp = posixpath.join(folder, f".tmp-{uuid.uuid4().hex[:12]}-{posixpath.basename(path)}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)
