"""Heartbeats of a dispatched step's run: the child beats a small lease object in the store, the
parent that dispatched it watches the beats by its own clock and declares the run dead when they stop.

**The carrier: a lease object in the store, keyed by the child's flow-run id**
(``{root}/leases/{run id}.json``, written atomically: a reader sees a whole beat or the one before).
The parent and the child already must share the store (the step's inputs and its artifact cross
through it), so the watch adds no new dependency; a write every ``dispatch.heartbeat_s`` is one small
object (a local file, or one S3 PUT). Prefect events were the alternative: they reach the server over
the events websocket in batches, their read-back API is paginated and eventually consistent, and a
server whose events are turned off (``PREFECT_SERVER_EVENTS_*``) would read as a dead run; Prefect's
own flow-run heartbeats have a 30 s floor. The lease is keyed by the run's id, never by the step,
so the stale lease of a dead run is never read as its retry's beat (the retry is another flow run).

**The watch is by the parent's own clock.** A beat carries a counter; :class:`Watch` notes when the
parent saw the counter change, so clocks that differ between the worker's machine and the parent's
do not matter. A run is dead when it is Running and no new beat came for ``timeout_s`` (or none at
all since the parent saw it Running); a run still Scheduled or Pending (queued behind a GPU's
concurrency slot) is never dead.

No Prefect here: ``flows/step.py`` beats, ``tasks/dispatch.py`` watches and marks the run Crashed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType

from coa import io

LEASES = "leases"


def lease_uri(store: io.Store, run_id: str) -> str:
    """Where the run ``run_id`` beats: ``{root}/leases/{run_id}.json``."""
    return io.join(store.root, LEASES, f"{run_id}.json")


@dataclasses.dataclass(frozen=True)
class Beat:
    """One beat: its number (counted from 0 by the child), when (the child's clock: for reading only),
    and who beats (host and process id)."""

    count: int
    at: str
    host: str
    pid: int


def read_beat(store: io.Store, run_id: str) -> Beat | None:
    """The last beat of the run ``run_id``, or None if it never beat (or its lease is gone)."""
    fs, path = io.filesystem(lease_uri(store, run_id), store.settings)
    try:
        with fs.open(path, "rb") as fh:
            return Beat(**json.loads(fh.read()))
    except (OSError, ValueError, TypeError):
        return None


def drop(store: io.Store, run_id: str) -> None:
    """Remove the run's lease (best effort: a lease left behind is never read for another run)."""
    fs, path = io.filesystem(lease_uri(store, run_id), store.settings)
    with contextlib.suppress(OSError):
        fs.rm(path)


class Heartbeat:
    """``with Heartbeat(store, run_id, every_s):`` beat now, then every ``every_s`` seconds from a
    daemon thread, until the block ends; the lease is removed then. A beat that fails to write (the
    store briefly unreachable) is skipped: the next one tries again, and a silence longer than the
    parent's timeout is, for the parent, a dead run."""

    def __init__(self, store: io.Store, run_id: str, every_s: float) -> None:
        if every_s <= 0:
            raise ValueError(f"a heartbeat needs a positive period, not {every_s}")
        self.store, self.run_id, self.every_s = store, run_id, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat_on, name=f"coa-heartbeat-{run_id}", daemon=True)
        self._count = 0

    def beat(self) -> None:
        """Write the next beat (atomically)."""
        record = Beat(self._count, dt.datetime.now(dt.UTC).isoformat(), socket.gethostname(), os.getpid())
        fs, path = io.filesystem(lease_uri(self.store, self.run_id), self.store.settings)
        with contextlib.suppress(OSError):
            io.write_atomic(fs, path, json.dumps(dataclasses.asdict(record)).encode())
            self._count += 1

    def _beat_on(self) -> None:
        while not self._stop.wait(self.every_s):
            self.beat()

    def __enter__(self) -> Heartbeat:
        self.beat()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, self.every_s))
        drop(self.store, self.run_id)


class Watch:
    """The parent's view of one child run's beats, by its own clock (``clock``: seconds, monotonic).

    Call :meth:`see` at each poll with whether the run is Running and its last beat; it returns the
    seconds of silence once they exceed ``timeout_s`` (the run is dead), else None."""

    def __init__(self, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s, self.clock = timeout_s, clock
        self.last: Beat | None = None
        self._since: float | None = None  # when the parent last saw a new beat, or saw it start running

    def see(self, running: bool, beat: Beat | None) -> float | None:
        """The silence (s) of a dead run, or None while it is alive or not running yet."""
        now = self.clock()
        if beat is not None and (self.last is None or beat.count != self.last.count):
            self.last, self._since = beat, now
        if not running:  # Scheduled, Pending (waiting for a slot or a worker): never dead
            if self.last is None:
                self._since = None
            return None
        if self._since is None:  # just seen Running: its first beat is due within timeout_s
            self._since = now
        silence = now - self._since
        return silence if silence > self.timeout_s else None

    def describe(self, silence: float) -> str:
        """Why the run is declared dead, for its Crashed state's message and the parent's log."""
        if self.last is None:
            return (
                f"no heartbeat in the {silence:.0f} s since it started running (dead after "
                f"{self.timeout_s:g} s): its worker or machine died"
            )
        return (
            f"no heartbeat for {silence:.0f} s (last beat {self.last.count} at {self.last.at} from "
            f"process {self.last.pid} on {self.last.host}; dead after {self.timeout_s:g} s): its worker "
            "or machine died"
        )
