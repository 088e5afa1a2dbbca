"""``python -m coa.kit.guard -- CMD ...``: run a launched trainer so it dies with its launcher.

:func:`coa.kit.launch.launch_accelerate` starts this guard in a session (process group) of its
own, with the trainer's output going to the run's log file, not the launcher's pipe. The guard starts
``CMD`` in that group and watches the process that started it: when that process is gone (a gpu
worker killed, a lost flow-run process: the guard is re-parented), it ends the whole group (SIGTERM,
then SIGKILL after :data:`GRACE_S`) instead of letting the trainer write on alone. Checkpoints are
written atomically (:mod:`coa.kit.checkpoints`), so a trainer killed in the middle of a save
leaves nothing that is read. Otherwise the guard exits with ``CMD``'s exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

GRACE_S = 3.0
POLL_S = 0.2


def end_group(grace_s: float = GRACE_S) -> None:
    """SIGTERM the guard's process group (the guard ignores it), SIGKILL what is left after ``grace_s``."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    time.sleep(grace_s)
    os.killpg(group, signal.SIGKILL)  # the guard too: nothing of the group outlives it


def main(argv: list[str]) -> int:
    cmd = argv[1:] if argv and argv[0] == "--" else argv
    if not cmd:
        print("usage: python -m coa.kit.guard -- CMD ...", file=sys.stderr)
        return 2
    parent = os.getppid()
    child = subprocess.Popen(cmd)

    def forward(signum: int, _frame: object) -> None:  # the launcher ends the run: end the group
        end_group()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        code = child.poll()
        if code is not None:
            return code
        if os.getppid() != parent:  # the launcher died without ending the run
            print(f"coa guard: launcher {parent} is gone; ending the trainer", file=sys.stderr, flush=True)
            end_group()
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
