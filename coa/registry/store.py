"""The model registry over the artifact store (a local folder or ``s3://``).

Layout under ``{root}/registry/{model name}/``:

* ``history/{time}-{id}.json``: one file per event (a candidate with its verdict, a promotion, a
  rollback), written once and never rewritten: the append-only history;
* ``champion.json``: the alias, the one file that says which model is in production. It holds the
  current champion and the stack of the champions before it (what :meth:`Registry.rollback`
  restores). It is replaced whole in one write (``write_atomic``'s rename on a local root, a single
  PUT on S3), so a reader sees the old alias or the new one, never a mix.

Every move of the alias (promote, rollback) reads the current champion and writes the new alias under
one lock per model name (``{root}/locks/registry/{name}.lock``, ``fcntl`` on a local root; the kernel
drops it when its process dies), so two nightly runs promoting at once never lose a promotion from
the stack nor decide on a champion that changed meanwhile (``promote(if_champion=...)``).

A promotion writes its history entry first, then the alias. A crash between the two leaves the old
champion in place (the entry exists, but :meth:`Registry.champion` reads only the alias), so there is
always exactly one champion; the entry says ``promote`` and :meth:`Registry.list` shows it was never
the champion.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import posixpath
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coa import io
from coa.errors import UserError
from coa.settings import Settings
from coa.tracking.mirror import mirror_event

ALIAS_FILE = "champion.json"
HISTORY_DIR = "history"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class RegistryError(UserError):
    """A registry operation that cannot be done (unknown name, nothing to roll back, a bad name)."""


class VerdictRecord(BaseModel):
    """A history entry's verdict, read typed: what the registry and its readers use of the record.

    The entry stores the verdict as the gate wrote it (:class:`coa.registry.gate.Verdict`, its
    ``to_dict()``: per-benchmark deltas included); this reads the decision back. A manual record
    (an operator's note, a test's) may lack the gate's keys: they take their defaults."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    promote: bool = Field(default=False, description="Whether the gate passed the candidate.")
    reasons: tuple[str, ...] = Field(default=(), description="Why, one line per deciding check.")
    checks: dict[str, bool] = Field(default_factory=dict, description="Check -> passed.")


class Entry(BaseModel):
    """One event in a model's history (never rewritten)."""

    model_config = ConfigDict(frozen=True)
    id: str = Field(description="Unique id: UTC time and a random suffix (sorts by time).")
    name: str = Field(description="Registered model name.")
    event: Literal["candidate", "promote", "rollback"] = Field(
        description="candidate: gated, not promoted; promote: became champion; rollback: alias moved back."
    )
    model_uri: str = Field(description="The model artifact (or folder / hub id) this event is about.")
    at: str = Field(description="When (ISO 8601, UTC).")
    evaluations: dict[str, str] = Field(
        default_factory=dict, description="Benchmark or role → eval.v1 artifact URI the verdict read."
    )
    verdict: dict[str, Any] | None = Field(
        default=None,
        description="The gate's verdict (promote, reasons, per-benchmark deltas); None if manual.",
    )
    reasons: tuple[str, ...] = Field(
        default=(), description="Why (the gate's reasons, or the operator's note)."
    )
    previous: str | None = Field(default=None, description="The champion's model URI before this event.")

    def decision(self) -> VerdictRecord | None:
        """The verdict, typed (None when the event carries none: a rollback, a manual promotion)."""
        return VerdictRecord.model_validate(self.verdict) if self.verdict is not None else None


class Champion(BaseModel):
    """The alias: the model in production, and the champions before it (newest last)."""

    model_config = ConfigDict(frozen=True)
    name: str
    model_uri: str
    entry: str = Field(description="Id of the history entry that made it champion.")
    since: str
    previous: tuple[tuple[str, str], ...] = Field(
        default=(), description="(model URI, entry id) of earlier champions, oldest first."
    )


class Registry:
    """Champion aliases and histories under ``{store root}/registry``."""

    def __init__(self, root: str | None = None, settings: Settings | None = None) -> None:
        store = io.Store(root, settings)
        self.settings = store.settings
        self.uri = io.join(store.root, "registry")
        self.fs, self.path = io.filesystem(self.uri, self.settings)

    # -- reading ------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every registered model name."""
        if not self.fs.exists(self.path):
            return []
        return sorted(
            posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.path, detail=False) if self.fs.isdir(p)
        )

    def champion(self, name: str) -> Champion | None:
        """The current champion of ``name`` (None before the first promotion)."""
        _check_name(name)
        try:
            with self.fs.open(self._alias(name), "rb") as fh:
                return Champion.model_validate_json(fh.read())
        except FileNotFoundError:
            return None

    def history(self, name: str) -> list[Entry]:
        """Every event of ``name``, oldest first."""
        _check_name(name)
        folder = posixpath.join(self.path, name, HISTORY_DIR)
        if not self.fs.exists(folder):
            return []
        files = sorted(p for p in self.fs.ls(folder, detail=False) if p.endswith(".json"))
        out = []
        for path in files:
            if posixpath.basename(path).startswith("."):
                continue
            with self.fs.open(path, "rb") as fh:
                out.append(Entry.model_validate_json(fh.read()))
        return out

    def resolve(self, name: str) -> str:
        """The champion's model URI; a clear error when ``name`` has none."""
        current = self.champion(name)
        if current is None:
            known = ", ".join(self.names()) or "none"
            raise RegistryError(
                f"model {name!r} has no champion yet (registered: {known}); `coa models promote`"
            )
        return current.model_uri

    # -- writing ------------------------------------------------------------------------------
    def record(
        self,
        name: str,
        model_uri: str,
        verdict: Mapping[str, Any] | None = None,
        evaluations: Mapping[str, str] | None = None,
        reasons: Sequence[str] = (),
    ) -> Entry:
        """Append a candidate that was not promoted (its verdict and reasons) to the history."""
        current = self.champion(name)
        entry = self._append(
            name,
            "candidate",
            model_uri,
            verdict,
            evaluations,
            reasons,
            current.model_uri if current else None,
        )
        mirror_event("candidate", name, model_uri, entry.decision(), reasons)
        return entry

    def promote(
        self,
        name: str,
        model_uri: str,
        verdict: Mapping[str, Any] | None = None,
        evaluations: Mapping[str, str] | None = None,
        reasons: Sequence[str] = (),
        if_champion: str | None | object = ...,
    ) -> Champion:
        """Make ``model_uri`` the champion of ``name``: history entry first, then the alias.

        ``if_champion``: the champion's model URI the gate compared against (None: there was none);
        when the champion changed meanwhile (another run promoted), nothing is written and a
        :class:`RegistryError` says so: gate the candidate against the new champion."""
        with self.lock(name):
            current = self.champion(name)
            now = current.model_uri if current else None
            if if_champion is not ... and if_champion != now:
                raise RegistryError(
                    f"the champion of {name!r} changed while {model_uri} was gated (it was {if_champion}, "
                    f"now {now}): another run promoted meanwhile; gate the candidate against the new champion"
                )
            entry = self._append(name, "promote", model_uri, verdict, evaluations, reasons, now)
            previous = current.previous + ((current.model_uri, current.entry),) if current else ()
            new = Champion(name=name, model_uri=model_uri, entry=entry.id, since=entry.at, previous=previous)
            self._write_alias(new)
        mirror_event("promote", name, model_uri, entry.decision(), reasons)  # after the lock: best effort
        return new

    def rollback(self, name: str, reason: str = "rollback") -> Champion:
        """Restore the champion before the current one (an error when there is none)."""
        with self.lock(name):
            current = self.champion(name)
            if current is None or not current.previous:
                raise RegistryError(f"model {name!r} has no earlier champion to roll back to")
            model_uri, entry_id = current.previous[-1]
            entry = self._append(name, "rollback", model_uri, None, None, (reason,), current.model_uri)
            restored = Champion(
                name=name, model_uri=model_uri, entry=entry_id, since=entry.at, previous=current.previous[:-1]
            )
            self._write_alias(restored)
        mirror_event("rollback", name, model_uri, None, (reason,))
        return restored

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold ``name``'s alias lock (local roots; on S3 the alias is one PUT, last writer wins)."""
        _check_name(name)
        if not _is_local(self.fs):
            yield
            return
        import fcntl

        folder = os.path.join(posixpath.dirname(self.path), io.LOCKS_DIR, "registry")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{name}.lock"), "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            yield  # closing the file drops the lock

    # -- internals ----------------------------------------------------------------------------
    def _alias(self, name: str) -> str:
        return posixpath.join(self.path, name, ALIAS_FILE)

    def _append(
        self,
        name: str,
        event: Literal["candidate", "promote", "rollback"],
        model_uri: str,
        verdict: Mapping[str, Any] | None,
        evaluations: Mapping[str, str] | None,
        reasons: Sequence[str],
        previous: str | None,
    ) -> Entry:
        _check_name(name)
        now = dt.datetime.now(dt.UTC)
        entry_id = f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}"
        entry = Entry(
            id=entry_id,
            name=name,
            event=event,
            model_uri=model_uri,
            at=now.isoformat(),
            evaluations=dict(evaluations or {}),
            verdict=dict(verdict) if verdict is not None else None,
            reasons=tuple(reasons),
            previous=previous,
        )
        path = posixpath.join(self.path, name, HISTORY_DIR, f"{entry_id}.json")
        self._put(path, entry.model_dump_json(indent=2).encode())
        return entry

    def _write_alias(self, champion: Champion) -> None:
        self._put(self._alias(champion.name), champion.model_dump_json(indent=2).encode())

    def _put(self, path: str, data: bytes) -> None:
        if _is_local(self.fs):
            io.write_atomic(self.fs, path, data)
        else:  # an object store: one PUT replaces the object whole (readers never see a part)
            self.fs.pipe_file(path, data)


def _is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocol or "local" in protocol


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise RegistryError(f"invalid model name {name!r}: letters, digits, '.', '_' and '-' only")


def to_json(value: BaseModel) -> str:
    """A registry record as indented JSON (for the CLI)."""
    return json.dumps(value.model_dump(mode="json"), indent=2)
