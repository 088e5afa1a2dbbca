"""Several machines, one run: ``torchrun``'s multi-node rendezvous, with the step's launcher as node 0.

A stage with ``nodes: N`` (N > 1) runs its recipe on N machines the job scheduler allocated as one
gang (a Slurm allocation, a Kubeflow ``PyTorchJob``): node 0 is where the step runs (the Prefect
worker inside the gang picked the flow run, or ``coa run`` was started there); nodes 1..N-1 run
the node agent, ``python -m coa.kit.node``. The step's launcher (:mod:`coa.kit.launch`)
writes the resolved config and the rows into the step's checkpoint folder as for one machine, then
announces the launch in ``$COA_NODES_DIR/launch.json`` (:class:`Launch`: the recipe's command, the
ranks per node, the rendezvous endpoint, a fresh id) and starts its own ``torchrun`` (or
``accelerate launch``) as node 0; each agent sees the announcement and starts the same command as its
node rank. The ranks meet at the endpoint (static rendezvous: node 0 hosts the store, rank 0 is on
node 0) and run as one world: the batch, the time budget and the refills are agreed over all ranks
exactly as on one machine (:mod:`coa.kit.ranks`). The announcement is removed when node 0's
launch ends, so an agent never joins a finished run; a retry is a new launch with a new id.

What every node must share: ``$COA_NODES_DIR`` and the step's checkpoint folder (a local store
root on a filesystem every node mounts, or ``$COA_CACHE_DIR`` there for an S3 store): rank 0 writes
the checkpoints, so whichever node the retry's node 0 is resumes from them.

Where the rendezvous is (infrastructure, so environment variables, set by the job template):
``$COA_RDZV_ENDPOINT`` (``host:port``) or ``$MASTER_ADDR`` and ``$MASTER_PORT`` (what a
``PyTorchJob`` sets); an agent's node rank is ``$COA_NODE_RANK``, else ``$PET_NODE_RANK`` or
``$SLURM_NODEID``. ``$COA_RDZV_TIMEOUT_S`` (default 600) bounds how long node 0 waits for the others.

A node lost mid-run fails the run on every other node: its ranks' sockets close, the next collective
on each surviving rank raises, and each node's agent (``--max-restarts 0``) ends its ranks and exits
non-zero; node 0's launcher raises the recipe's error and the step fails, to be retried. A node that
goes *silent* instead (frozen, cut off by a partition, its sockets left open) would leave the others
blocked in a collective that gloo never times out: every node of a launch therefore writes a heartbeat
(:class:`Heartbeats`, a counter in ``$COA_NODES_DIR/beats/<launch id>/``, bumped every
:data:`BEAT_S`) and watches the others'; when one has not moved for ``$COA_NODE_SILENT_S`` seconds
(default :data:`DEFAULT_SILENT_S`) each surviving node ends its ranks and its launch fails, naming the
silent node. Counters, not file times: the nodes' clocks need not agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from coa.errors import InfraError

ENDPOINT_ENV = "COA_RDZV_ENDPOINT"
NODE_RANK_ENVS = ("COA_NODE_RANK", "PET_NODE_RANK", "SLURM_NODEID")
NODES_DIR_ENV = "COA_NODES_DIR"
TIMEOUT_ENV = "COA_RDZV_TIMEOUT_S"
SILENT_ENV = "COA_NODE_SILENT_S"
LAUNCH_FILE = "launch.json"
BEATS_DIR = "beats"
DEFAULT_TIMEOUT_S = 600
DEFAULT_SILENT_S = 30
BEAT_S = 1.0
"""How often each node bumps its heartbeat (the launch's wait loop polls at this rate)."""


class NodesError(ValueError):
    """The multi-node environment is incomplete (a variable missing or malformed)."""


class NodeSilent(InfraError):
    """A node of the launch stopped sending heartbeats; this node ended its ranks (the message says which)."""


@dataclasses.dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a run meet, read from the environment (:func:`rendezvous`)."""

    host: str
    port: int
    nodes_dir: Path
    timeout_s: int
    silent_s: int = DEFAULT_SILENT_S


def _seconds(name: str, default: int, what: str) -> int:
    value = os.environ.get(name, str(default))
    if not value.isdigit() or int(value) < 1:
        raise NodesError(f"{name}={value!r}: give {what} in whole seconds (e.g. {default})")
    return int(value)


def rendezvous() -> Rendezvous:
    """The rendezvous endpoint, the shared announcement folder and the join timeout from the
    environment; :class:`NodesError` naming the variable to set."""
    endpoint = os.environ.get(ENDPOINT_ENV)
    if not endpoint and os.environ.get("MASTER_ADDR"):
        endpoint = f"{os.environ['MASTER_ADDR']}:{os.environ.get('MASTER_PORT', '29500')}"
    if not endpoint:
        raise NodesError(
            f"a run on several nodes needs the rendezvous endpoint: set {ENDPOINT_ENV}=host:port (node 0's "
            "address, a free port) or MASTER_ADDR and MASTER_PORT, on every node"
        )
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise NodesError(f"{ENDPOINT_ENV}={endpoint!r} is not host:port (e.g. 10.0.0.5:29500)")
    folder = os.environ.get(NODES_DIR_ENV)
    if not folder:
        raise NodesError(
            f"a run on several nodes needs {NODES_DIR_ENV}: a folder every node mounts (e.g. on the shared "
            "filesystem of the checkpoints), where node 0 announces each launch to the other nodes' agents"
        )
    timeout = _seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, "the seconds node 0 waits for the others")
    silent = _seconds(SILENT_ENV, DEFAULT_SILENT_S, "the seconds a node may go without a heartbeat")
    if silent <= 2 * BEAT_S:
        raise NodesError(f"{SILENT_ENV}={silent}: give more than {2 * BEAT_S:g} (a beat every {BEAT_S:g} s)")
    return Rendezvous(host, int(port), Path(folder), timeout, silent)


def node_rank() -> int:
    """This machine's node rank from the scheduler's environment (``$COA_NODE_RANK``, else
    ``$PET_NODE_RANK`` or ``$SLURM_NODEID``); :class:`NodesError` when none is set."""
    for name in NODE_RANK_ENVS:
        value = os.environ.get(name)
        if value is not None:
            if not value.isdigit():
                raise NodesError(f"{name}={value!r} is not a node rank (0, 1, ...)")
            return int(value)
    raise NodesError(f"no node rank: set one of {', '.join(NODE_RANK_ENVS)} on each node")


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of a recipe on several nodes, as node 0 announces it to the others."""

    id: str
    how: Literal["torchrun", "accelerate"]
    nodes: int
    per_node: int
    """Ranks on each node (GPUs per machine)."""
    accelerate_config: str | None
    host: str
    port: int
    timeout_s: int
    silent_s: int
    """Seconds without a heartbeat after which a node counts as lost (node 0's setting, for all)."""
    args: tuple[str, ...]
    """What follows the launcher's own arguments: ``-m <recipe> --config resolved.yaml ...``."""
    log_dir: str
    """The run's output folder, where each agent appends to ``train.node<k>.log``."""

    def command(self, rank: int) -> list[str]:
        """The full command node ``rank`` runs (its launcher, then the recipe's arguments)."""
        if not 0 <= rank < self.nodes:
            raise NodesError(f"node rank {rank} is outside this launch's {self.nodes} nodes")
        rdzv = f"timeout={self.timeout_s}"
        if self.how == "torchrun":
            prefix = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.nodes)]
            prefix += ["--node-rank", str(rank), "--nproc-per-node", str(self.per_node)]
            prefix += ["--master-addr", self.host, "--master-port", str(self.port)]
            prefix += ["--rdzv-conf", rdzv, "--max-restarts", "0"]
        else:
            assert self.accelerate_config is not None
            prefix = [
                sys.executable,
                "-m",
                "accelerate.commands.launch",
                "--config_file",
                self.accelerate_config,
            ]
            prefix += ["--num_processes", str(self.nodes * self.per_node), "--num_machines", str(self.nodes)]
            prefix += ["--machine_rank", str(rank), "--main_process_ip", self.host]
            prefix += ["--main_process_port", str(self.port), "--rdzv_conf", rdzv, "--max_restarts", "0"]
        return [*prefix, *self.args]

    def log_file(self, rank: int) -> Path:
        return Path(self.log_dir) / f"train.node{rank}.log"


def plan(
    how: Literal["torchrun", "accelerate"],
    nodes: int,
    per_node: int,
    accelerate_config: str | None,
    out: Path,
) -> Launch:
    """A new launch (fresh id) at the environment's rendezvous; its arguments are set by :func:`announced`."""
    where = rendezvous()
    return Launch(
        id=uuid.uuid4().hex,
        how=how,
        nodes=nodes,
        per_node=per_node,
        accelerate_config=accelerate_config,
        host=where.host,
        port=where.port,
        timeout_s=where.timeout_s,
        silent_s=where.silent_s,
        args=(),
        log_dir=str(out),
    )


@contextlib.contextmanager
def announced(launch: Launch) -> Iterator[None]:
    """``launch`` announced in ``$COA_NODES_DIR/launch.json`` (written atomically) while the block runs;
    removed after, so no agent joins it once node 0's launch has ended."""
    folder = rendezvous().nodes_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LAUNCH_FILE
    tmp = folder / f".{LAUNCH_FILE}.{launch.id}.tmp"
    beats = folder / BEATS_DIR / launch.id
    beats.mkdir(parents=True, exist_ok=True)  # before the announcement: agents beat only into it
    tmp.write_text(json.dumps(dataclasses.asdict(launch)))
    tmp.replace(path)
    try:
        yield
    finally:
        current = read_launch(folder)
        if current is not None and current.id == launch.id:
            path.unlink(missing_ok=True)
        shutil.rmtree(beats, ignore_errors=True)


def read_launch(folder: Path) -> Launch | None:
    """The launch announced in ``folder``, or None."""
    try:
        values = json.loads((folder / LAUNCH_FILE).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    values["args"] = tuple(values["args"])
    values.setdefault("silent_s", DEFAULT_SILENT_S)  # announced by a node 0 of before the heartbeats
    return Launch(**values)


class Heartbeats:
    """Node ``rank``'s heartbeat in a launch, and its watch over the other nodes' (see the module).

    :meth:`check` is called about every :data:`BEAT_S` while the launch runs: it bumps this node's
    counter and returns why the run must end (a node silent for ``launch.silent_s``), else None. A node
    is watched from its first beat on (one that never joins is the rendezvous timeout's to report).
    Node 0 creates the launch's folder before announcing it and removes it after; the agents write only
    into an existing folder, so none is left behind.
    """

    def __init__(self, folder: Path, launch: Launch, rank: int) -> None:
        self.dir = folder / BEATS_DIR / launch.id
        self.rank, self.nodes, self.silent_s = rank, launch.nodes, launch.silent_s
        self.count = 0
        self.seen: dict[int, tuple[str, float]] = {}
        """Each other node's last counter and the monotonic time it was first read."""

    def beat(self) -> None:
        if not self.dir.is_dir():
            return
        self.count += 1
        tmp = self.dir / f".node{self.rank}.tmp"
        with contextlib.suppress(FileNotFoundError):  # node 0 removed the folder: the launch is over
            tmp.write_text(str(self.count))
            tmp.replace(self.dir / f"node{self.rank}")

    def check(self, now: float | None = None) -> str | None:
        self.beat()
        now = time.monotonic() if now is None else now
        for k in range(self.nodes):
            if k == self.rank:
                continue
            try:
                value = (self.dir / f"node{k}").read_text()
            except FileNotFoundError:
                continue
            last = self.seen.get(k)
            if last is None or last[0] != value:
                self.seen[k] = (value, now)
            elif now - last[1] > self.silent_s:
                return (
                    f"node {k} sent no heartbeat for {now - last[1]:.0f} s ({SILENT_ENV}={self.silent_s}): "
                    "it is frozen, cut off or gone, so node "
                    f"{self.rank} ended its ranks instead of waiting in a collective that never returns"
                )
        return None
