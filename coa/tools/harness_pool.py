"""Harness sandboxes on the host side: many programs per sandbox start, and warm sandboxes ahead.

A fresh bubblewrap sandbox per program costs a sandbox start plus an interpreter start (with the
virtualenv's ``site``), ~25 ms here, which dominated code scoring (5 tests = 5 starts). Here one
sandbox runs :mod:`coa.tools.sandbox_harness`, which forks a fresh, limited process per program
from its warm interpreter and restores a clean scratch area after each one (see there for what is
isolated and how). The confinement is the sandbox's own (:mod:`coa.tools.sandbox`: same mounts,
namespaces, seccomp filter, unprivileged uid); the per-program limits are the ``SandboxConfig``'s.

* :class:`HarnessSandbox`: one started sandbox; :meth:`~HarnessSandbox.run` runs one program.
* :class:`ProgramRunner`: programs one after another (the tests of one code-scoring run) in one
  sandbox, replaced by a fresh one whenever the harness is lost (a program killed it, it hung, or
  it could not restore a clean state); used by :func:`coa.tools.code.run_tests`.
* :class:`SandboxPool`: ``size`` sandboxes started ahead by a background thread; a call takes one,
  runs ONE program and discards it (no state carries over between calls) while a new one starts.
  :func:`shared_pool` gives one pool per process and config (the ``code`` tool's).

Results are :class:`~coa.tools.sandbox.SandboxResult` as from :func:`~coa.tools.sandbox.run_python`,
except that ``duration_s`` counts from the program's own start (the sandbox is already up).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import json
import os
import queue
import selectors
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from coa.tools.sandbox import (
    SandboxConfig,
    SandboxResult,
    SandboxUnavailable,
    _await_teardown,
    _build,
    _infer_reason,
    _select_mode,
    spawn,
)

__all__ = [
    "HarnessLost",
    "HarnessSandbox",
    "ProgramRunner",
    "SandboxPool",
    "close_shared_pools",
    "shared_pool",
]

_HARNESS_SOURCE = Path(__file__).with_name("sandbox_harness.py")
_START_TIMEOUT_S = 30.0
_GRACE_S = 3.0  # beyond the program's wall limit before the host gives up on the harness
_CHUNK = 65536


class HarnessLost(RuntimeError):
    """The sandbox's harness is gone (or never became ready).

    ``how``: ``"timeout"`` (it did not answer in time), ``"exited"`` (it died) or ``"failed"``
    (it reported that it could not go on, or garbled its answer). ``result``: the verdict of the
    program that was running, when :meth:`HarnessSandbox.run` raised it.
    """

    def __init__(self, message: str, how: str = "failed", result: SandboxResult | None = None) -> None:
        super().__init__(message)
        self.how = how
        self.result = result


_lock = threading.Lock()
_started: set[tuple[str, str]] = set()  # (bwrap, python) for which a harness sandbox has started


@functools.lru_cache(maxsize=1)
def _harness_source() -> bytes:
    return _HARNESS_SOURCE.read_bytes()


class HarnessSandbox:
    """One started sandbox running the harness; runs programs one at a time, each a fresh process.

    Raises :class:`~coa.tools.sandbox.SandboxUnavailable` when no sandbox works here (also when no
    harness sandbox has ever started in this process: a broken harness must not pass for failing
    programs) and :class:`HarnessLost` when this one failed to start. Not thread-safe: one caller
    at a time.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        mode, message = _select_mode(self.config)
        if mode is None:
            raise SandboxUnavailable(f"refusing to run code without a sandbox: {message}")
        cmd, plan = _build(self.config, mode, b"", harness=_harness_source())
        self._proc = spawn(cmd, plan)
        assert self._proc.stdin and self._proc.stdout and self._proc.stderr
        self._in, self._out = self._proc.stdin.fileno(), self._proc.stdout.fileno()
        os.set_blocking(self._in, False)
        self._buf = bytearray()
        self._pid1: int | None = None
        self.alive = True
        self.programs = 0
        try:
            ready = self._message(time.monotonic() + _START_TIMEOUT_S)
        except HarnessLost as e:
            self._pid1 = plan.sandbox_pid()
            self._kill()
            self._start_failed(str(e))
        self._pid1 = plan.sandbox_pid()  # bwrap reported it before the harness could answer
        if "ready" not in ready:
            self._kill()
            self._start_failed(str(ready.get("fatal", ready)))
        with _lock:
            _started.add((self.config.bwrap, self.config.python))

    def _start_failed(self, why: str) -> NoReturn:
        """A sandbox that never started here is unavailable (loudly), a later failure is one loss."""
        with _lock:
            worked_before = (self.config.bwrap, self.config.python) in _started
        if not worked_before:
            raise SandboxUnavailable(f"the harness sandbox does not start here: {why}")
        raise HarnessLost(f"the sandbox did not start: {why}")

    # -- protocol ----------------------------------------------------------------------------------

    def _wait(self, fd: int, event: int, deadline: float) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, event)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sel.select(remaining):
                raise TimeoutError

    def _fill(self, deadline: float) -> None:
        self._wait(self._out, selectors.EVENT_READ, deadline)
        data = os.read(self._out, _CHUNK)
        if not data:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=0.5)  # let it exit, so that its diagnostics can be read
            raise HarnessLost(f"the sandbox's harness exited{self._stderr_tail()}", "exited")
        self._buf += data

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self._buf:
            try:
                self._fill(deadline)
            except TimeoutError:
                raise HarnessLost("the sandbox's harness did not answer in time", "timeout") from None
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        try:
            message = json.loads(line)
        except ValueError:
            raise HarnessLost(f"garbled message from the sandbox's harness: {line[:200]!r}") from None
        if not isinstance(message, dict):
            raise HarnessLost(f"garbled message from the sandbox's harness: {line[:200]!r}")
        return message

    def _exact(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            try:
                self._fill(deadline)
            except TimeoutError:
                raise HarnessLost("the sandbox's harness did not answer in time", "timeout") from None
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._in, view[:_CHUNK]) :]
            except BlockingIOError:
                try:
                    self._wait(self._in, selectors.EVENT_WRITE, deadline)
                except TimeoutError:
                    raise HarnessLost("the sandbox's harness stopped reading", "timeout") from None
            except OSError as e:  # EPIPE: the harness is gone
                why = f"the sandbox's harness exited ({e.strerror}){self._stderr_tail()}"
                raise HarnessLost(why, "exited") from None

    def _stderr_tail(self) -> str:
        """The harness's diagnostics, once it has exited (never blocks on a live one)."""
        if self._proc.poll() is None:
            return ""
        assert self._proc.stderr is not None
        os.set_blocking(self._proc.stderr.fileno(), False)
        try:
            text = (self._proc.stderr.read() or b"").decode("utf-8", errors="replace").strip()
        except OSError:
            text = ""
        return f": {text[-600:]}" if text else ""

    # -- running -----------------------------------------------------------------------------------

    def usable(self) -> bool:
        """Started, not lost, and its harness still running (checked without blocking)."""
        if not self.alive or self._proc.poll() is not None:
            return False
        with selectors.DefaultSelector() as sel:  # an idle harness writes nothing: data = a fatal
            sel.register(self._out, selectors.EVENT_READ)
            return not sel.select(0)

    def run(self, code: str, stdin: str = "") -> SandboxResult:
        """Run ``code`` as ``main.py`` in a fresh process of this sandbox, feeding it ``stdin``.

        Raises :class:`HarnessLost` (the sandbox is then closed) when the harness is lost; its
        ``result`` is the program's verdict when the program itself most likely caused the loss
        (a hang past the wall limit, the harness killed mid-run), else ``None``.
        """
        if not self.alive:
            raise HarnessLost("this sandbox was lost or closed")
        source = code.encode("utf-8", errors="surrogatepass")
        data = stdin.encode("utf-8", errors="surrogatepass")
        start = time.monotonic()
        deadline = start + self.config.wall_seconds + _GRACE_S
        self.programs += 1
        try:
            self._send(json.dumps({"code": len(source), "stdin": len(data)}).encode() + b"\n", deadline)
            self._send(source + data, deadline)
            header = self._message(deadline)
            if "exit_code" not in header:
                raise HarnessLost(f"the sandbox's harness failed: {header.get('fatal', header)}")
            out = self._exact(int(header["stdout"]), deadline)
            err = self._exact(int(header["stderr"]), deadline)
        except HarnessLost as e:
            self._kill()
            raise HarnessLost(str(e), e.how, self._lost_result(e, start)) from None
        if not header.get("clean", False):
            self._kill()  # the result stands, but this sandbox is no longer clean
        return self._result(header, out, err)

    def _result(self, header: dict[str, Any], out: bytes, err: bytes) -> SandboxResult:
        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        code = int(header["exit_code"])
        killed = header.get("killed")
        if killed is None and code != 0:
            killed = _infer_reason(code, stderr)
        return SandboxResult(
            exit_code=code,
            stdout=stdout,
            stderr=stderr,
            timed_out=killed in ("wall_time", "cpu_time"),
            killed_reason=killed,
            duration_s=float(header["duration"]),
            stdout_truncated=bool(header["stdout_truncated"]),
            stderr_truncated=bool(header["stderr_truncated"]),
        )

    def _lost_result(self, lost: HarnessLost, start: float) -> SandboxResult | None:
        """The verdict of a program during which the harness was lost, when the program is to blame."""
        duration = time.monotonic() - start
        if lost.how == "timeout":  # e.g. the program stopped the harness (SIGSTOP)
            return SandboxResult(-9, "", f"[sandbox] {lost}", True, "wall_time", duration)
        if lost.how == "exited":  # e.g. the program killed the harness
            return SandboxResult(
                -9, "", f"[sandbox] {lost} during the program's run", False, "signal", duration
            )
        return None

    def _kill(self) -> None:
        self.alive = False
        if self._proc.poll() is None:
            self._proc.kill()
        self._reap()

    def _reap(self) -> None:
        self._proc.wait()
        for f in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        _await_teardown(self._pid1)

    def close(self, wait: bool = True) -> None:
        """End the harness (EOF on its stdin) and wait until every sandboxed process is gone.

        ``wait=False`` leaves the waiting to a background thread. Either way no program is running
        any more: the harness killed each program's processes before it reported the result.
        """
        if self._proc.returncode is not None and not self.alive:
            return
        self.alive = False
        assert self._proc.stdin is not None
        with contextlib.suppress(OSError):
            self._proc.stdin.close()
        if wait:
            self._finish()
        else:
            _closer().put(self)

    def _finish(self) -> None:
        try:
            self._proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._reap()

    def __enter__(self) -> HarnessSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@functools.lru_cache(maxsize=1)
def _closer() -> queue.SimpleQueue[HarnessSandbox]:
    """A queue served by one daemon thread that waits for closed sandboxes to go away."""
    todo: queue.SimpleQueue[HarnessSandbox] = queue.SimpleQueue()

    def serve() -> None:
        while True:
            sandbox = todo.get()
            with contextlib.suppress(Exception):
                sandbox._finish()

    threading.Thread(target=serve, name="sandbox-closer", daemon=True).start()
    return todo


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
    """``size`` harness sandboxes started ahead; each call runs one program in one, then drops it.

    A background thread keeps ``size`` sandboxes ready and closes used ones. :meth:`take` returns a
    warm sandbox, or starts one in the caller's thread when none is ready (``misses`` counts those).
    The thread that starts a sandbox must outlive it (bwrap's ``--die-with-parent`` follows the
    starting thread), which is why warm ones come from the pool's own long-lived thread.
    """

    def __init__(self, config: SandboxConfig | None = None, size: int = 2) -> None:
        if size < 0:
            raise ValueError(f"SandboxPool size must be >= 0, got {size}")
        self.config = config or SandboxConfig()
        self.size = size
        self.hits = 0
        self.misses = 0
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
                    self._idle.append(fresh)
                self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._stopped

    def ready(self) -> int:
        """How many warm sandboxes are waiting right now."""
        with self._cond:
            return len(self._idle)

    def wait_ready(self, count: int | None = None, timeout: float = _START_TIMEOUT_S) -> bool:
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
        """A started sandbox for the caller's exclusive use; hand it back with :meth:`discard`."""
        if os.getpid() != self._pid:  # forked: the warm ones and the thread belong to the parent
            self.__init__(self.config, self.size)  # type: ignore[misc]
        with self._cond:
            if self._stopped:
                raise RuntimeError("SandboxPool is closed")
            while self._idle:
                sandbox = self._idle.popleft()
                self._cond.notify_all()
                if sandbox.usable():
                    self.hits += 1
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

    def run(self, code: str, stdin: str = "") -> SandboxResult:
        """Run one program in a warm sandbox, as :func:`~coa.tools.sandbox.run_python` does."""
        runner = ProgramRunner(self.config, pool=self)
        try:
            return runner.run(code, stdin)
        finally:
            if runner._sandbox is not None:
                self.discard(runner._sandbox)
                runner._sandbox = None

    def close(self) -> None:
        """Stop the background thread and close every sandbox (waits until all are gone)."""
        with self._cond:
            self._stopped = True
            idle, self._idle = list(self._idle), collections.deque()
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=_START_TIMEOUT_S + 5)
        with self._cond:
            retired, self._retired = self._retired, []
        for sandbox in idle + retired:
            sandbox.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_shared: dict[tuple[int, SandboxConfig, int], SandboxPool] = {}
_shared_lock = threading.Lock()


def shared_pool(config: SandboxConfig | None = None, size: int = 2) -> SandboxPool:
    """The process-wide pool for ``(config, size)``, created (and its sandboxes started) on first use."""
    key = (os.getpid(), config or SandboxConfig(), size)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None or pool.closed:
            pool = _shared[key] = SandboxPool(key[1], size)
        return pool


@atexit.register
def close_shared_pools() -> None:
    """Close every pool :func:`shared_pool` made in this process (at exit, or to start from none)."""
    with _shared_lock:
        pools = [p for (pid, _, _), p in _shared.items() if pid == os.getpid()]
        _shared.clear()
    for pool in pools:
        pool.close()
