"""``python -m coa.kit.node``: the agent of nodes 1..N-1 of a multi-node run (see
:mod:`coa.kit.nodes`).

The job template starts it on every node but node 0, with the same environment (``$COA_NODES_DIR``,
the rendezvous endpoint) and the node's rank. It waits for node 0 to announce a launch, runs that
launch's command as its node rank (under :mod:`coa.kit.guard`, output appended to
``train.node<k>.log`` in the run's folder), and waits for the next one: a retried step is a new
launch. It exits after ``--idle-exit-s`` seconds without a launch (status 0: the gang is released),
after one launch with ``--once`` (that launch's status), or when ended (SIGTERM: its running launch
is ended too). While a launch runs it beats and watches the other nodes' heartbeats
(:class:`~coa.kit.nodes.Heartbeats`): a node silent for ``$COA_NODE_SILENT_S`` ends this node's
ranks rather than leave them blocked.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from coa.kit import nodes
from coa.kit.launch import run_guarded

POLL_S = 0.2


def serve(folder: Path, rank: int, idle_exit_s: float | None, once: bool) -> int:
    """Run each launch announced in ``folder`` as node ``rank``; with ``once`` the launch's exit status,
    else 0 when idle for ``idle_exit_s`` (a failed launch is node 0's to report: its step fails)."""
    seen: set[str] = set()
    last = time.monotonic()
    while True:
        launch = nodes.read_launch(folder)
        if launch is not None and launch.id not in seen:
            seen.add(launch.id)
            print(f"node {rank}: joining launch {launch.id} ({launch.how}, {launch.nodes} nodes)", flush=True)
            try:
                watch = nodes.Heartbeats(folder, launch, rank).check
                code = run_guarded(launch.command(rank), launch.log_file(rank), watch=watch)
            except nodes.NodeSilent as e:
                print(f"node {rank}: {e}", flush=True)
                code = 1
            print(f"node {rank}: launch {launch.id} exited with {code}", flush=True)
            if once:
                return code
            last = time.monotonic()
        elif idle_exit_s is not None and time.monotonic() - last > idle_exit_s:
            print(f"node {rank}: no launch for {idle_exit_s:g} s; exiting", flush=True)
            return 0
        time.sleep(POLL_S)


def parser() -> argparse.ArgumentParser:
    """The agent's command line (the job templates in infra/ are checked against it)."""
    parser = argparse.ArgumentParser(prog="python -m coa.kit.node", description=__doc__)
    parser.add_argument(
        "--idle-exit-s", type=float, default=None, help="exit after this long without a launch"
    )
    parser.add_argument("--once", action="store_true", help="exit after one launch, with its status")
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = parser().parse_args(argv)
    try:
        rank = nodes.node_rank()
        folder = nodes.rendezvous().nodes_dir
    except nodes.NodesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if rank == 0:
        print(
            "error: node 0 runs the step itself (its launcher); start the agent on nodes 1..N-1",
            file=sys.stderr,
        )
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run_guarded's finally ends the launch
    return serve(folder, rank, ns.idle_exit_s, ns.once)


if __name__ == "__main__":
    sys.exit(main())
