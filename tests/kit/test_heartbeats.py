"""A node that goes silent (frozen, cut off: its sockets left open) ends the launch on the other nodes
within ``$COA_NODE_SILENT_S``: the heartbeats of :mod:`coa.kit.nodes`, read by the launch's wait
loop (:func:`coa.kit.launch.run_guarded`), which then ends every process the run started, also
those in sessions of their own (as torchrun starts its workers). The same path on two real torchrun
nodes is tests/train/test_multi_node.py's fault case."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from coa.kit import nodes
from coa.kit.launch import descendants, run_guarded

from .test_guard import _alive, _wait_for


def _launch(nodes_count: int = 2, silent_s: int = 3) -> nodes.Launch:
    return nodes.Launch(
        id="l1", how="torchrun", nodes=nodes_count, per_node=1, accelerate_config=None, host="127.0.0.1",
        port=1, timeout_s=60, silent_s=silent_s, args=(), log_dir="/tmp",
    )  # fmt: skip


def test_a_node_is_lost_when_its_counter_stops_not_by_its_clock(tmp_path: Path) -> None:
    launch = _launch(nodes_count=3, silent_s=5)
    (tmp_path / nodes.BEATS_DIR / launch.id).mkdir(parents=True)
    zero, one = nodes.Heartbeats(tmp_path, launch, 0), nodes.Heartbeats(tmp_path, launch, 1)
    assert zero.check(now=0.0) is None  # node 1 has not beaten yet: not watched; node 2 never joins
    one.beat()
    assert zero.check(now=1.0) is None
    one.beat()
    assert zero.check(now=5.5) is None  # it moved at 5.5: silent since then, not since 1.0
    assert zero.check(now=10.0) is None  # 4.5 s without a beat: within 5
    said = zero.check(now=11.0)
    assert (
        said is not None
        and said.startswith("node 1 sent no heartbeat for 6 s")
        and "COA_NODE_SILENT_S=5" in said
    )
    assert (tmp_path / nodes.BEATS_DIR / launch.id / "node0").read_text() == "5"  # node 0 beat at each check


def test_no_folder_no_beat_and_old_announcements_still_read(tmp_path: Path) -> None:
    nodes.Heartbeats(tmp_path, _launch(), 1).beat()  # node 0 removed the launch's folder: nothing written
    assert not (tmp_path / nodes.BEATS_DIR).exists()
    (tmp_path / nodes.LAUNCH_FILE).write_text(
        '{"id": "x", "how": "torchrun", "nodes": 2, "per_node": 1, "accelerate_config": null, '
        '"host": "h", "port": 1, "timeout_s": 60, "args": ["-m", "m"], "log_dir": "/tmp"}'
    )
    assert nodes.read_launch(tmp_path) == nodes.Launch(
        id="x", how="torchrun", nodes=2, per_node=1, accelerate_config=None, host="h", port=1, timeout_s=60,
        silent_s=nodes.DEFAULT_SILENT_S, args=("-m", "m"), log_dir="/tmp",
    )  # fmt: skip


def test_the_silent_setting_is_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(nodes.ENDPOINT_ENV, "127.0.0.1:29500")
    monkeypatch.setenv(nodes.NODES_DIR_ENV, str(tmp_path))
    assert nodes.rendezvous().silent_s == nodes.DEFAULT_SILENT_S
    monkeypatch.setenv(nodes.SILENT_ENV, "1")
    with pytest.raises(nodes.NodesError, match="COA_NODE_SILENT_S=1: give more than 2"):
        nodes.rendezvous()
    monkeypatch.setenv(nodes.SILENT_ENV, "soon")
    with pytest.raises(nodes.NodesError, match="whole seconds"):
        nodes.rendezvous()


# A "rank" as torchrun starts one: in a session of its own, deaf to SIGTERM (blocked in a collective).
WORKER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    if sys.argv[1] == "parent":
        subprocess.Popen([sys.executable, __file__, "rank", sys.argv[2]], start_new_session=True)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(sys.argv[2], "w").write(str(os.getpid()))
    while True:
        time.sleep(0.1)
    """
)

PEER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from coa.kit import nodes
    launch = nodes.Launch(id="l1", how="torchrun", nodes=2, per_node=1, accelerate_config=None,
                          host="127.0.0.1", port=1, timeout_s=60, silent_s=3, args=(), log_dir="/tmp")
    beats = nodes.Heartbeats(Path(sys.argv[1]), launch, 1)
    while True:
        beats.beat()
        time.sleep(0.2)
    """
)


def test_a_frozen_node_ends_the_run_and_every_process_it_started(tmp_path: Path) -> None:
    """Node 1 (a process beating) is frozen with SIGSTOP; node 0's wait ends within silent_s + 2 beats,
    raising NodeSilent, and its rank (own session, ignoring SIGTERM) is gone."""
    launch = _launch(silent_s=3)
    (tmp_path / nodes.BEATS_DIR / launch.id).mkdir(parents=True)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    root = str(Path(__file__).resolve().parents[2])
    peer = subprocess.Popen(
        [sys.executable, "-c", PEER, str(tmp_path)], env=os.environ | {"PYTHONPATH": root}
    )
    try:
        beat = tmp_path / nodes.BEATS_DIR / launch.id / "node1"
        _wait_for(beat)
        watch = nodes.Heartbeats(tmp_path, launch, 0).check
        frozen_at: list[float] = []

        def poll() -> None:
            if not frozen_at and (tmp_path / "rank.pid").exists():
                os.kill(peer.pid, signal.SIGSTOP)
                frozen_at.append(time.monotonic())

        cmd = [sys.executable, str(script), "parent", str(tmp_path / "rank.pid")]
        with pytest.raises(nodes.NodeSilent, match="node 1 sent no heartbeat"):
            run_guarded(
                cmd, tmp_path / "train.log", grace_s=1.0, poll=poll, poll_s=0.2, watch=watch, timeout_s=60
            )
        ended_in = time.monotonic() - frozen_at[0]
        assert ended_in < launch.silent_s + 3, f"ended {ended_in:.1f} s after the freeze"
        rank = int((tmp_path / "rank.pid").read_text())
        deadline = time.monotonic() + 5
        while _alive(rank) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(rank), "the rank in its own session outlived the ended run"
    finally:
        peer.kill()
        peer.wait()


def test_descendants_are_found_across_sessions() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(30)'], start_new_session=True); time.sleep(30)"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while len(found := descendants(child.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(found) == 1 and os.getsid(found[0]) != os.getsid(child.pid)
    finally:
        for pid in descendants(child.pid):
            os.kill(pid, signal.SIGKILL)
        child.kill()
        child.wait()
