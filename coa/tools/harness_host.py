"""One harness sandbox on the host side: a started sandbox that runs many programs, one at a time.

A fresh bubblewrap sandbox per program costs a sandbox start plus an interpreter start (with the
virtualenv's ``site``), ~25 ms here, which dominated code scoring (5 tests = 5 starts). Here one
sandbox runs :mod:`coa.tools.sandbox_harness`, which forks a fresh, limited process per program
from its warm interpreter and restores a clean scratch area after each one (see there for what is
isolated and how). The confinement is the sandbox's own (:mod:`coa.tools.sandbox`: same mounts,
namespaces, seccomp filter, unprivileged uid); the per-program limits are the ``SandboxConfig``'s.

:class:`HarnessSandbox` is one started sandbox (:meth:`~HarnessSandbox.run` runs one program);
:class:`HarnessLost` says its harness is gone. :mod:`coa.tools.harness_pool` runs programs on them
(one after another, or from sandboxes started ahead). Results are
:class:`~coa.tools.sandbox.SandboxResult` as from :func:`~coa.tools.sandbox.run_python`, except that
``duration_s`` counts from the program's own start (the sandbox is already up).
"""

from __future__ import annotations

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

__all__ = ["HarnessLost", "HarnessSandbox"]

_HARNESS_SOURCE = Path(__file__).with_name("sandbox_harness.py")
START_TIMEOUT_S = 30.0
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
            ready = self._message(time.monotonic() + START_TIMEOUT_S)
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
