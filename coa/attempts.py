"""A step's attempts: the failure marker a build that died leaves, and what its rerun resumes from.

The runner (:mod:`coa.steps`) writes the marker when a build raises (still under the address's
lock, so an identical run waiting on it sees the failure) and removes it on commit; ``coa run
--dry-run`` (:mod:`coa.plan.preview`) and a crashed dispatched step (``tasks/dispatch.py``) say what
the rerun resumes from. The marker lives outside the artifact folder, so a committed folder holds
only its manifest's files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import posixpath
from typing import Any

from coa import io


def failure_marker(writer_path: str) -> str:
    """Where the failure marker of the artifact at ``writer_path`` lives: ``{root}/failures/{kind}/
    {name}-{key}.json``, outside the artifact folder (a committed folder holds only its manifest's files)."""
    kind_dir = posixpath.dirname(writer_path)
    root = posixpath.dirname(kind_dir)
    return posixpath.join(
        root, "failures", posixpath.basename(kind_dir), f"{posixpath.basename(writer_path)}.json"
    )


def mark_failed(writer: io.ArtifactWriter, step: str, error: BaseException) -> None:
    """Leave the failure marker of ``step``'s build in ``writer`` (the error and when; best effort)."""
    message = str(error) or {KeyboardInterrupt: "interrupted (Ctrl-C)", SystemExit: "stopped"}.get(
        type(error), type(error).__name__
    )
    record = {
        "step": step,
        "error": type(error).__name__,
        "message": message[:2000],
        "at": dt.datetime.now(dt.UTC).isoformat(),
    }
    with contextlib.suppress(OSError):  # the marker is informational; the original error matters
        io.write_atomic(writer.fs, failure_marker(writer.path), json.dumps(record).encode())


def clear_failed(writer: io.ArtifactWriter) -> None:
    """Remove the failure marker once the build committed."""
    marker = failure_marker(writer.path)
    if writer.fs.exists(marker):
        writer.fs.rm(marker)


def rerun_hint(store: io.Store, uri: str) -> str:
    """How to go on after a build of ``uri`` died: rerun, and what the rerun resumes from."""
    then = resumes(store, uri).removeprefix("; ")
    return f"rerun the same command: it {then}" if then else "rerun the same command to build it again"


def resumes(store: io.Store, uri: str) -> str:
    """What a rebuild of ``uri`` resumes from, read from disk: ``checkpoint N (its path)`` of the last
    *complete* checkpoint (its trainer state is there; a checkpoint being written lives under a
    ``.staging`` folder and is never counted), or that it starts again from step 0."""
    fs, folder = io.filesystem(store.checkpoint_uri(uri), store.settings)
    if not fs.exists(folder):
        return ""
    states = fs.glob(posixpath.join(folder, "checkpoint-*", "trainer_state.json")) + fs.glob(
        posixpath.join(folder, "*", "checkpoint-*", "trainer_state.json")
    )
    found = []
    for state in states:
        checkpoint = posixpath.dirname(state)
        number = posixpath.basename(checkpoint).split("-")[-1]
        if number.isdigit() and "/.staging/" not in f"/{checkpoint}/" and _readable_json(fs, state):
            found.append((int(number), checkpoint))
    if found:
        step, path = max(found)
        return f"; resumes from checkpoint {step} ({path})"
    trained = fs.glob(posixpath.join(folder, "*", "checkpoint-*")) + fs.glob(
        posixpath.join(folder, "checkpoint-*")
    )
    if trained or fs.exists(posixpath.join(folder, "checkpoints")):
        return f"; starts again from step 0 (no complete checkpoint in {folder})"
    return "; resumes from what it checkpointed" if fs.ls(folder, detail=False) else ""


def _readable_json(fs: Any, path: str) -> bool:
    try:
        with fs.open(path, "rb") as fh:
            json.loads(fh.read())
    except (OSError, ValueError):
        return False
    return True


def last_failure(store: io.Store, uri: str) -> dict[str, Any] | None:
    """The failure marker of the artifact at ``uri``, if its last build died."""
    fs, path = io.filesystem(uri, store.settings)
    marker = failure_marker(path)
    if not fs.exists(marker):
        return None
    with fs.open(marker, "rb") as fh:
        record: dict[str, Any] = json.loads(fh.read())
    return record
