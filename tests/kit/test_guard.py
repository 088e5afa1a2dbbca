"""A launched trainer runs in a process group of its own, with its own log file, and dies with the
process that launched it (killed outright, not only interrupted) instead of writing on alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from coa.kit.launch import run_guarded

TRAINER = textwrap.dedent(
    """
    import os, sys, time
    open(sys.argv[1], "w").write(str(os.getpid()))
    print("training", flush=True)
    while True:
        time.sleep(0.1)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by init) counts as gone
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


def _wait_for(path: Path, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_the_trainer_dies_with_its_killed_launcher(tmp_path: Path) -> None:
    pid_file, log = tmp_path / "trainer.pid", tmp_path / "train.log"
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from coa.kit.launch import run_guarded; "
            f"run_guarded([sys.executable, {str(script)!r}, {str(pid_file)!r}], Path({str(log)!r}))",
        ],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    trainer = _wait_for(pid_file)
    assert os.getpgid(trainer) != os.getpgid(launcher.pid)  # a group of its own
    launcher.send_signal(signal.SIGKILL)  # the worker is killed: no finally, no handler runs
    launcher.wait()
    deadline = time.monotonic() + 10
    while _alive(trainer) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(trainer), "the trainer outlived its launcher"
    text = log.read_text()
    assert "training" in text and "launcher" in text and "is gone" in text  # its own log file


def test_the_exit_status_and_the_output_come_back(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    code = run_guarded([sys.executable, "-c", "print('step 1'); raise SystemExit(7)"], log)
    assert code == 7 and "step 1" in log.read_text()


def test_the_launcher_polls_while_it_waits_and_still_ends_a_run_past_its_timeout(tmp_path: Path) -> None:
    import pytest

    polls: list[float] = []
    start = time.monotonic()
    sleeper = [sys.executable, "-c", "import time; time.sleep(1.5)"]
    code = run_guarded(sleeper, tmp_path / "a.log", poll=lambda: polls.append(time.monotonic()), poll_s=0.2)
    assert code == 0 and len(polls) >= 4  # while it ran (the relay of its progress), and once at its end
    assert polls[-1] - start >= 1.5
    with pytest.raises(subprocess.TimeoutExpired):
        run_guarded([sys.executable, "-c", TRAINER, str(tmp_path / "pid")], tmp_path / "b.log",
                    timeout_s=3.0, poll=lambda: None, poll_s=0.3)  # fmt: skip
    assert time.monotonic() - start < 15
    assert not _alive(int((tmp_path / "pid").read_text()))  # the group was ended
