"""A dispatched run's heartbeats (coa/heartbeat.py): the lease a run beats in the store, and the
parent's watch of it by its own clock (a fake clock here; the dispatch's use of it is
tests/tasks/test_dispatch_retry.py, the real server's tests/flows/test_worker_killed.py)."""

from __future__ import annotations

import time
from pathlib import Path

from coa import io
from coa.heartbeat import Beat, Heartbeat, Watch, lease_uri, read_beat


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _beat(count: int) -> Beat:
    return Beat(count, "2026-01-01T00:00:00+00:00", "gpu-1", 42)


def test_a_run_beats_its_own_lease_and_removes_it_when_it_ends(storage_root: Path) -> None:
    store = io.Store()
    with Heartbeat(store, "run-a", 0.05):
        first = read_beat(store, "run-a")
        time.sleep(0.3)
        later = read_beat(store, "run-a")
        assert read_beat(store, "run-b") is None  # keyed by the run: another run never reads it
    assert first is not None and later is not None and later.count > first.count >= 0
    assert lease_uri(store, "run-a") == f"{store.root}/leases/run-a.json"
    assert read_beat(store, "run-a") is None


def test_the_watch_declares_dead_only_a_running_run_that_stopped_beating() -> None:
    clock = Clock()
    watch = Watch(timeout_s=60, clock=clock)
    for clock.now in (0, 100, 1000):  # queued (Scheduled, Pending) for a long time: never dead
        assert watch.see(False, None) is None
    assert watch.see(True, _beat(0)) is None
    for count, clock.now in enumerate((1010, 1020, 1070), start=1):  # new beats keep it alive
        assert watch.see(True, _beat(count)) is None
    clock.now = 1130  # the same beat read again for 60 s: alive until the timeout is passed
    assert watch.see(True, _beat(3)) is None
    clock.now = 1131
    assert watch.see(True, _beat(3)) == 61
    said = watch.describe(61)
    assert said.startswith("no heartbeat for 61 s (last beat 3 at 2026-01-01T00:00:00+00:00 from process 42")
    assert "on gpu-1; dead after 60 s): its worker or machine died" in said


def test_a_run_that_never_beats_is_dead_a_timeout_after_it_was_seen_running() -> None:
    clock = Clock()
    watch = Watch(timeout_s=60, clock=clock)
    assert watch.see(False, None) is None
    clock.now = 500
    assert watch.see(True, None) is None  # just started: its first beat is due within the timeout
    clock.now = 561
    assert watch.see(True, None) == 61
    assert watch.describe(61).startswith("no heartbeat in the 61 s since it started running")
