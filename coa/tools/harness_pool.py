"""Harness sandboxes put to work: programs one after another, and warm sandboxes started ahead.

A harness sandbox (:class:`~coa.tools.harness_host.HarnessSandbox`, see there for what it
isolates and what it costs) runs many programs per sandbox start.

* :class:`ProgramRunner`: programs one after another (the tests of one code-scoring run) in one
  sandbox, replaced by a fresh one whenever the harness is lost (a program killed it, it hung, or
  it could not restore a clean state); used by :func:`coa.tools.code.run_tests`.
* :class:`SandboxPool`: ``size`` sandboxes started ahead by a background thread; a call takes one
  and runs ONE program in it. With ``programs_per_sandbox=1`` the sandbox is then discarded while a
  new one starts; with more (the ``code`` tool's pools) it goes back to the pool for the next call
  until it has run that many programs. No state carries over between calls either way: each program
  is a fresh process, and the harness kills whatever it started and empties ``/tmp`` and
  ``/dev/shm`` before it reports (:mod:`coa.tools.sandbox_harness`), which is what already lets one
  sandbox score many candidate programs (:func:`coa.tools.code.run_tests_batch`). A sandbox start
  costs ~50 ms of CPU against ~6 ms for a program in a started one (``bench/bench_sandbox.py``).
  :func:`shared_pool` gives one pool per process, config and reuse (the ``code`` tool's).

Results are :class:`~coa.tools.sandbox.SandboxResult` as from :func:`~coa.tools.sandbox.run_python`,
except that ``duration_s`` counts from the program's own start (the sandbox is already up).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Iterator

from coa.tools.harness_host import START_TIMEOUT_S, HarnessLost, HarnessSandbox
from coa.tools.sandbox import SandboxConfig, SandboxResult, SandboxUnavailable

__all__ = ["PROGRAMS_PER_SANDBOX", "ProgramRunner", "SandboxPool", "close_shared_pools", "shared_pool"]

PROGRAMS_PER_SANDBOX = 256
"""Calls one of the code tool's sandboxes serves before it is replaced. Each call is a fresh process
whose leftovers (processes, ``/tmp``, ``/dev/shm``, SysV IPC) the harness removes before it reports,
as between the tests of a scoring run; a sandbox start costs ~50 ms of CPU, a call in a started one
~6 ms (``bench/bench_sandbox.py``), and collection makes one call or more per task."""


class ProgramRunner:
    """Run programs one after another, each as its own process, in as few sandboxes as possible.

    The first :meth:`run` starts a sandbox (or takes a warm one from ``pool``); it is reused until
    its harness is lost, then the next program gets a fresh sandbox. A program whose run cost the
    harness fails alone. Use as a context manager (the sandbox is closed on exit).
    """

    def __init__(self, config: SandboxConfig | None = None, pool: SandboxPool | None = None) -> None:
        self.config = config or SandboxConfig()
        self.pool = pool
        self.sandboxes_started = 0
        self._sandbox: HarnessSandbox | None = None

    @property
    def programs(self) -> int:
        """Programs run in the current sandbox so far (0 before the first, or after a loss)."""
        return self._sandbox.programs if self._sandbox is not None and self._sandbox.alive else 0

    def run(self, code: str, stdin: str = "") -> SandboxResult:
        """One program's result; never raises for the program's own behaviour."""
        if self._sandbox is not None and not self._sandbox.alive:
            self._sandbox.close()
            self._sandbox = None
        if self._sandbox is None:
            try:
                self._sandbox = self.pool.take() if self.pool is not None else HarnessSandbox(self.config)
            except HarnessLost as e:  # could not start: the program did not run, as with run_python
                return SandboxResult(1, "", f"[sandbox] {e}")
            self.sandboxes_started += 1
        try:
            return self._sandbox.run(code, stdin)
        except HarnessLost as e:
            if e.result is not None:
                return e.result
            return SandboxResult(1, "", f"[sandbox] {e}")

    def close(self, wait: bool = True) -> None:
        """Close the current sandbox (``wait=False``: its teardown finishes in the background)."""
        if self._sandbox is not None:
            self._sandbox.close(wait)
            self._sandbox = None

    def __enter__(self) -> ProgramRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SandboxPool:
    """``size`` harness sandboxes started ahead; each call runs one program in one.

    A background thread keeps ``size`` sandboxes ready and closes used ones. :meth:`take` returns a
    warm sandbox, or starts one in the caller's thread when none is ready (``misses`` counts those).
    The thread that starts a sandbox must outlive it (bwrap's ``--die-with-parent`` follows the
    starting thread), which is why warm ones come from the pool's own long-lived thread. After a
    call (:meth:`run`, or :meth:`give_back` after :meth:`take`) a sandbox the pool's thread started,
    still running and with fewer than ``programs_per_sandbox`` programs behind it, waits for the next
    call at the front of the queue, before the fresh ones the thread started meanwhile (``reuses``
    counts those calls); any other is closed. So the pool holds at most ``size``
    more sandboxes than its callers ever ran at once.
    """

    def __init__(
        self, config: SandboxConfig | None = None, size: int = 2, programs_per_sandbox: int = 1
    ) -> None:
        if size < 0:
            raise ValueError(f"SandboxPool size must be >= 0, got {size}")
        if programs_per_sandbox < 1:
            raise ValueError(f"programs_per_sandbox must be >= 1, got {programs_per_sandbox}")
        self.config = config or SandboxConfig()
        self.size = size
        self.programs_per_sandbox = programs_per_sandbox
        self.hits = 0
        self.misses = 0
        self.reuses = 0
        self._own: weakref.WeakSet[HarnessSandbox] = weakref.WeakSet()  # started by the pool's thread
        self.last_error: str | None = None
        self._idle: collections.deque[HarnessSandbox] = collections.deque()
        self._retired: list[HarnessSandbox] = []
        self._cond = threading.Condition()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        if size:
            self._start_thread()

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._keep_warm, name="sandbox-pool", daemon=True)
        self._thread.start()

    def _keep_warm(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not self._retired and len(self._idle) >= self.size:
                    self._cond.wait()
                stopped = self._stopped
                retired, self._retired = self._retired, []
                want = not stopped and len(self._idle) < self.size
            for sandbox in retired:
                sandbox.close()
            if stopped:
                return
            if not want:
                continue
            try:
                fresh = HarnessSandbox(self.config)
            except (SandboxUnavailable, HarnessLost, OSError) as e:
                self.last_error = str(e)
                with self._cond:  # back off (no sandbox here: until woken); take() still tries cold
                    self._cond.wait(timeout=None if isinstance(e, SandboxUnavailable) else 5.0)
                continue
            with self._cond:
                if self._stopped:
                    self._retired.append(fresh)
                else:
                    self._own.add(fresh)
                    self._idle.append(fresh)
                self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._stopped

    def ready(self) -> int:
        """How many warm sandboxes are waiting right now."""
        with self._cond:
            return len(self._idle)

    def wait_ready(self, count: int | None = None, timeout: float = START_TIMEOUT_S) -> bool:
        """Block until ``count`` (default: ``size``) sandboxes are warm; False on timeout."""
        want = self.size if count is None else count
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._idle) < want:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopped:
                    return False
                self._cond.wait(remaining)
            return True

    def take(self) -> HarnessSandbox:
        """A started sandbox for the caller's exclusive use; hand it back with :meth:`give_back`."""
        if os.getpid() != self._pid:  # forked: the warm ones and the thread belong to the parent
            self.__init__(self.config, self.size, self.programs_per_sandbox)  # type: ignore[misc]
        with self._cond:
            if self._stopped:
                raise RuntimeError("SandboxPool is closed")
            while self._idle:
                sandbox = self._idle.popleft()
                self._cond.notify_all()
                if sandbox.usable():
                    self.hits += 1
                    self.reuses += sandbox.programs > 0
                    return sandbox
                self._retired.append(sandbox)
        self.misses += 1
        return HarnessSandbox(self.config)

    def discard(self, sandbox: HarnessSandbox) -> None:
        """Retire a used sandbox (closed in the background); it is never handed out again."""
        sandbox.alive = False
        with self._cond:
            if self._thread is None or self._stopped:
                retire_now = True
            else:
                retire_now = False
                self._retired.append(sandbox)
                self._cond.notify_all()
        if retire_now:
            sandbox.close()

    def give_back(self, sandbox: HarnessSandbox) -> None:
        """Return a sandbox after a call: kept for the next one while reusable, else retired."""
        with self._cond:
            keep = (
                not self._stopped
                and sandbox.alive
                and sandbox in self._own
                and sandbox.programs < self.programs_per_sandbox
                and os.getpid() == self._pid
            )
            if keep:  # first in line: a fresh one started while this one ran waits for a busier moment
                self._idle.appendleft(sandbox)
                self._cond.notify_all()
        if not keep:
            self.discard(sandbox)

    @contextlib.contextmanager
    def runner(self) -> Iterator[ProgramRunner]:
        """A :class:`ProgramRunner` on this pool's sandboxes: the one it used goes back on exit."""
        runner = ProgramRunner(self.config, pool=self)
        try:
            yield runner
        finally:
            if runner._sandbox is not None:
                self.give_back(runner._sandbox)
                runner._sandbox = None

    def run(self, code: str, stdin: str = "") -> SandboxResult:
        """Run one program in a warm sandbox, as :func:`~coa.tools.sandbox.run_python` does."""
        with self.runner() as runner:
            return runner.run(code, stdin)

    def close(self) -> None:
        """Stop the background thread and close every sandbox (waits until all are gone)."""
        with self._cond:
            self._stopped = True
            idle, self._idle = list(self._idle), collections.deque()
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=START_TIMEOUT_S + 5)
        with self._cond:
            retired, self._retired = self._retired, []
        for sandbox in idle + retired:
            sandbox.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: dict[tuple[int, SandboxConfig, int, int], SandboxPool] = {}
_shared_lock = threading.Lock()


def shared_pool(
    config: SandboxConfig | None = None, size: int = 2, programs_per_sandbox: int = PROGRAMS_PER_SANDBOX
) -> SandboxPool:
    """The process-wide pool for ``(config, size, programs_per_sandbox)``, created (and its
    sandboxes started) on first use."""
    key = (os.getpid(), config or SandboxConfig(), size, programs_per_sandbox)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool.closed:
            pool = _shared[key] = SandboxPool(key[1], size, programs_per_sandbox)
        return pool


@atexit.register
def close_shared_pools() -> None:
    """Close every pool :func:`shared_pool` made in this process (at exit, or to start from none)."""
    with _shared_lock:
        pools = [p for (pid, *_), p in _shared.items() if pid == os.getpid()]
        _shared.clear()
    for pool in pools:
        pool.close()
