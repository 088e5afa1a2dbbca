"""The ledger of nights: what each night of one nightly configuration committed, one JSON file each.

``{root}/nightly/{run name}/{night}.json``, written once when the night's collection is committed and
never rewritten: it is how the next night knows what was collected before (the nightly plan makes
the earlier nights' collections inputs of ``nightly.new_tasks`` and ``nightly.merge``).
"""

from __future__ import annotations

import datetime as dt
import posixpath
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from coa import io
from coa.settings import Settings

Record = TypeVar("Record", bound=BaseModel)


def read_records(fs: Any, folder: str, model: type[Record]) -> list[Record]:
    """Every ``*.json`` record in ``folder``, in name order (hidden files, such as an atomic write's
    temporary, skipped); none when the folder does not exist. The ledger's nights, the nightly history."""
    if not fs.exists(folder):
        return []
    files = sorted(p for p in fs.ls(folder, detail=False) if p.endswith(".json"))
    out = []
    for path in files:
        if not posixpath.basename(path).startswith("."):
            with fs.open(path, "rb") as fh:
                out.append(model.model_validate_json(fh.read()))
    return out


class Night(BaseModel):
    """What one night committed: its collection and the tasks it collected on."""

    model_config = ConfigDict(frozen=True)
    night: str
    collected: str
    tasks: str
    at: str


class Ledger:
    """The nights of one nightly configuration (``run_name``), one JSON file each."""

    def __init__(self, run_name: str, root: str | None = None, settings: Settings | None = None) -> None:
        store = io.Store(root, settings)
        self.fs, self.path = io.filesystem(io.join(store.root, "nightly", run_name), store.settings)

    def nights(self) -> list[Night]:
        return read_records(self.fs, self.path, Night)

    def before(self, night: str, limit: int | None = None) -> list[Night]:
        """The nights before ``night`` (by label order), at most the last ``limit``."""
        earlier = [n for n in self.nights() if n.night < night]
        return earlier if limit is None else earlier[len(earlier) - limit :] if limit else []

    def record(self, night: str, collected: str, tasks: str) -> Night:
        """Record ``night`` (a rerun of the same night keeps its first record)."""
        path = posixpath.join(self.path, f"{night}.json")
        entry = Night(night=night, collected=collected, tasks=tasks, at=dt.datetime.now(dt.UTC).isoformat())
        if self.fs.exists(path):
            with self.fs.open(path, "rb") as fh:
                return Night.model_validate_json(fh.read())
        io.write_atomic(self.fs, path, entry.model_dump_json(indent=2).encode())
        return entry
