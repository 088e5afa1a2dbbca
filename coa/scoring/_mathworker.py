"""Worker processes for math comparisons requested from threads other than the main thread.

``signal``-based deadlines only work in the main thread, so ``coa.scoring.math.check_math`` sends a
comparison made from any other thread here: a pool of long-lived ``python -m
coa.scoring._mathworker_main`` processes (the worker's side, a module of its own), each running
comparisons in its own main thread under the same SIGALRM deadline. The parent waits for the reply
for the budget plus a grace period and kills a worker that does not answer (a C routine that
ignores signals, a crash), so the caller gets "timeout" and never hangs. Workers start lazily
(about a second each, to import sympy and math-verify), are reused, and are killed at exit. Pool
size: ``$COA_SCORING_MATH_WORKERS``, else min(4, CPUs); threads beyond that wait for a free worker.

Protocol: one JSON object per line. The worker first writes ``{"ready": true}``; each request
``{"pred_expr", "pred_raw", "boxed", "gold_exprs", "timeout_s", "float_rounding"}`` gets
``{"reason", "index"}``; a request ``{"mode": "afm", "answer", "golds", "timeout_s"}`` (AFM's
rule, ``coa.scoring.math.afm_math_verify``) gets ``{"equal", "reason"}``. The worker's real
stdout carries only this protocol; anything else that
writes to stdout in the worker goes to stderr.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, cast

from coa.errors import InfraError

GRACE_S = 2.0
"""Extra wall-clock time the parent grants a worker beyond the comparison's own budget."""
STARTUP_TIMEOUT_S = 60.0
DEFAULT_MAX_WORKERS = int(os.environ.get("COA_SCORING_MATH_WORKERS", "0")) or max(
    1, min(4, os.cpu_count() or 1)
)
"""Worker processes in the shared pool: ``$COA_SCORING_MATH_WORKERS``, else min(4, CPUs)."""

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def worker_argv() -> list[str]:
    return [sys.executable, "-m", "coa.scoring._mathworker_main"]


class WorkerError(InfraError, RuntimeError):
    """A math worker process could not be started."""


class _Worker:
    def __init__(self, argv: Sequence[str], startup_timeout_s: float) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0
        )
        self._buffer = b""
        line = self._read_line(time.monotonic() + startup_timeout_s)
        ready = False
        if line is not None:
            try:
                ready = json.loads(line).get("ready") is True
            except ValueError:
                ready = False
        if not ready:
            self.kill()
            raise WorkerError(f"math worker {list(argv)} did not start (no ready line)")

    def _read_line(self, deadline: float) -> bytes | None:
        stdout = cast(IO[bytes], self.proc.stdout)
        fd = stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # EOF: the worker died
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        stdin = cast(IO[bytes], self.proc.stdin)
        try:
            stdin.write(json.dumps(payload).encode() + b"\n")
            stdin.flush()
        except OSError:
            return None
        line = self._read_line(time.monotonic() + timeout_s)
        if line is None:
            return None
        try:
            reply = json.loads(line)
        except ValueError:
            return None
        return reply if isinstance(reply, dict) else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class WorkerPool:
    """At most ``max_workers`` worker processes; a thread borrows one per request."""

    def __init__(
        self,
        argv: Sequence[str] | None = None,
        *,
        max_workers: int = DEFAULT_MAX_WORKERS,
        grace_s: float = GRACE_S,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be >= 1")
        self.argv = list(argv) if argv is not None else worker_argv()
        self.max_workers = max_workers
        self.grace_s = grace_s
        self.startup_timeout_s = startup_timeout_s
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._count = 0
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        # A forked child must not share its parent's pipes: forget the parent's workers.
        if os.getpid() != self._pid:
            self._idle, self._count, self._pid = [], 0, os.getpid()
            self._cond = threading.Condition()

    def _acquire(self) -> _Worker:
        with self._cond:
            self._check_fork()
            while not self._idle and self._count >= self.max_workers:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1
        try:
            return _Worker(self.argv, self.startup_timeout_s)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self._cond:
            if healthy:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()

    def call(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """Send one request; ``None`` if the worker did not answer within ``timeout_s`` + grace."""
        worker = self._acquire()
        reply: dict[str, Any] | None = None
        try:
            reply = worker.request(payload, timeout_s + self.grace_s)
        finally:
            self._release(worker, reply is not None)
        return reply

    @property
    def size(self) -> int:
        """Live workers (idle or busy)."""
        with self._cond:
            return self._count

    def close(self) -> None:
        """Kill the idle workers (busy ones are killed when they come back unhealthy or at exit)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for worker in idle:
            worker.kill()


_POOL = WorkerPool()
atexit.register(_POOL.close)


def check_in_worker(
    pred_expr: str,
    pred_raw: str,
    boxed: bool,
    gold_exprs: Sequence[str],
    *,
    timeout_s: float,
    float_rounding: int,
    pool: WorkerPool | None = None,
) -> tuple[Any, int | None]:
    """``coa.scoring.math.check_prepared`` run in a worker process; ("timeout", None) on no reply."""
    payload = {
        "pred_expr": pred_expr,
        "pred_raw": pred_raw,
        "boxed": boxed,
        "gold_exprs": list(gold_exprs),
        "timeout_s": timeout_s,
        "float_rounding": float_rounding,
    }
    reply = (pool or _POOL).call(payload, timeout_s)
    if reply is None:
        return "timeout", None
    index = reply.get("index")
    return reply.get("reason", "error"), index if isinstance(index, int) else None


def afm_in_worker(
    answer: str,
    golds: Sequence[str],
    *,
    timeout_s: float,
    budget_s: float,
    pool: WorkerPool | None = None,
) -> tuple[bool, str]:
    """``coa.scoring.math.afm_check_prepared`` run in a worker process, given ``budget_s`` for the reply
    (``coa.scoring.math.afm_budget_s``: the caller's, so this module imports nothing of it); (False,
    "timeout") on no reply."""
    payload = {"mode": "afm", "answer": answer, "golds": list(golds), "timeout_s": timeout_s}
    reply = (pool or _POOL).call(payload, budget_s)
    if reply is None:
        return False, "timeout"
    return bool(reply.get("equal")), str(reply.get("reason", "error"))
