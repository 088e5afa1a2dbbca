"""The in-sandbox harness: runs many programs in ONE bubblewrap sandbox, each as a fresh process.

This file is not imported by the host: :mod:`coa.tools.harness_host` binds its source read-only into
the sandbox (``/opt/coa-harness/harness.py``) and starts it there as the sandbox's program, after
the sandbox dropped to its unprivileged uid. Standard library only; it runs under the sandbox's
interpreter with ``site`` loaded once, which is what makes a program's start cheap: each program is
a child forked from the warm interpreter (no second interpreter start-up), not a new ``exec``.

Protocol (binary-safe, over the harness's own stdin/stdout pipes, which no program can reach):

* harness -> host, once: ``{"ready": <pid>}\\n``;
* host -> harness, per program: ``{"code": <bytes>, "stdin": <bytes>}\\n`` then those raw bytes;
* harness -> host, per program, once the sandbox is clean again: ``{"exit_code", "stdout",
  "stderr", "stdout_truncated", "stderr_truncated", "killed", "duration", "clean"}\\n``
  (``stdout``/``stderr`` are byte counts) then the raw bytes; with ``"clean": false`` (plus
  ``"fatal"``) it exits after the message, and a bare ``{"fatal": <why>}\\n`` when the program
  could not be run at all. EOF on its stdin ends it.

Per program, in order:

1. ``/tmp/workspace`` is created afresh with the code as ``main.py``;
2. a child is forked: new session, its own stdin/stdout/stderr pipes on fds 0-2 and no other fd,
   rlimits (CPU, address space, processes, file size, open files, no core) set on itself, then
   the code runs as ``__main__`` as ``python main.py`` would run it (``sys.argv``, ``sys.path[0]``,
   fresh std streams, ``SystemExit``/traceback/``atexit``/thread shutdown, exit status);
3. the harness feeds stdin, captures at most ``max_output`` bytes per stream, kills at the wall
   limit (or the output limit), and when the child has exited kills every other process in the
   sandbox but itself and pid 1 (``kill(-1, SIGKILL)``, repeated until ``/proc`` shows none), so
   nothing a program started outlives it;
4. ``/tmp`` and ``/dev/shm`` are emptied and SysV IPC objects removed, so the next program starts
   from a clean scratch area. POSIX message queues and kernel keyrings are refused by the
   sandbox's seccomp filter, so they cannot carry state either.

The harness is non-dumpable (``PR_SET_DUMPABLE`` 0), so the programs (same uid) can neither
ptrace it nor open its ``/proc/<pid>/fd`` (its protocol pipes) or memory. A program can still kill
it; the host then fails that program and continues in a fresh sandbox.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import json
import os
import resource
import selectors
import signal
import sys
import time
import types
from importlib.machinery import SourceFileLoader
from typing import Any, NoReturn

WORKDIR = "/tmp/workspace"
HARNESS_PATH = "/opt/coa-harness/harness.py"  # where coa.tools.sandbox binds this file
SCRATCH_ROOTS = ("/tmp", "/dev/shm")
_PR_SET_DUMPABLE = 4
_IPC_RMID = 0
_CHUNK = 65536
_KILLED = -9  # exit code reported when the harness killed the program (wall time, output limit)

# Keep the interpreter's original std streams alive forever: a child replaces sys.stdin/... and
# their deallocation would otherwise close fds 0-2, which by then are the child's own pipes.
_ORIGINAL_STREAMS = (sys.stdin, sys.stdout, sys.stderr)
_libc = ctypes.CDLL(None, use_errno=True)


def _set_dumpable(flag: bool) -> None:
    if _libc.prctl(_PR_SET_DUMPABLE, int(flag), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


# --------------------------------------------------------------------------------------------------
# The child: one program, run like `python main.py`


def _stream(fd: int, name: str, writing: bool, like: Any) -> Any:
    import io

    raw = io.FileIO(fd, "wb" if writing else "rb", closefd=False)
    raw.name = name  # type: ignore[misc]
    buffered: Any = io.BufferedWriter(raw) if writing else io.BufferedReader(raw)
    return io.TextIOWrapper(
        buffered,
        encoding=getattr(like, "encoding", None) or "utf-8",
        errors=getattr(like, "errors", None) or "strict",
        newline="\n",
        line_buffering=bool(getattr(like, "line_buffering", False)),
    )


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code % 256
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def _trimmed(exc: BaseException) -> BaseException:
    """``exc`` without the harness's own frames at the top of its traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return exc.with_traceback(tb)


def _run_main(path: str) -> int:
    """Execute ``path`` as ``__main__`` with ``python main.py`` semantics; the exit status."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        stream = _stream(fd, f"<{name}>", fd > 0, _ORIGINAL_STREAMS[fd])
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.argv = [os.path.basename(path)]
    sys.orig_argv = [sys.executable, os.path.basename(path)]
    sys.path[0] = os.path.dirname(path)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__loader__ = SourceFileLoader("__main__", path)
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    status, interrupted = 0, False
    try:
        with open(path, "rb") as fh:
            source = fh.read()
        exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        trimmed = _trimmed(exc)
        sys.excepthook(type(trimmed), trimmed, trimmed.__traceback__)
        status, interrupted = 1, isinstance(exc, KeyboardInterrupt)
    status = _finalize(status)
    if interrupted:  # like CPython: die from SIGINT so the parent sees the signal
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return status


def _finalize(status: int) -> int:
    """Interpreter shutdown as CPython does it: join threads, run atexit, flush the streams."""
    threading = sys.modules.get("threading")
    try:
        if threading is not None:
            threading._shutdown()  # type: ignore[attr-defined]
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        trimmed = _trimmed(exc)
        sys.excepthook(type(trimmed), trimmed, trimmed.__traceback__)
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            status = 120
    return status


def _child(path: str, fds: tuple[int, int, int], limits: dict[str, Any]) -> NoReturn:
    status = 125
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 20)
        _set_dumpable(True)
        cpu, mem, nproc = limits["cpu_seconds"], limits["memory_bytes"], limits["nproc"]
        fsize, nofile = limits["file_bytes"], limits["nofile"]
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        os.chdir(WORKDIR)
        status = _run_main(path)
    except BaseException as exc:  # the harness's own failure to set the child up
        with contextlib.suppress(OSError):
            os.write(2, f"sandbox harness: cannot start the program: {exc!r}\n".encode())
    os._exit(status)


# --------------------------------------------------------------------------------------------------
# The parent: run one program, then restore a clean sandbox


class _Capture:
    def __init__(self, cap: int) -> None:
        self.cap, self.kept, self.total = cap, 0, 0
        self.chunks: list[bytes] = []

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - self.kept
        if room > 0:
            self.chunks.append(data[:room])
            self.kept += min(room, len(data))

    @property
    def overflow(self) -> bool:
        return self.total > self.cap


def _other_pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]


def _reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_all(timeout: float = 2.0) -> bool:
    """SIGKILL every process in the sandbox but pid 1 and the harness; True once none is left."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        _reap_children()
        if not _other_pids():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0005)


def _empty_dir(dir_fd: int, depth: int = 0) -> None:
    if depth > 64:
        raise OSError("scratch directory nested too deeply to clean")
    with os.scandir(dir_fd) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if not is_dir:
            os.unlink(name, dir_fd=dir_fd)
            continue
        os.chmod(name, 0o700, dir_fd=dir_fd, follow_symlinks=False)
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            _empty_dir(sub, depth + 1)
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dir_fd)


def _remove_sysv_ipc() -> None:
    calls = {"shm": _libc.shmctl, "msg": _libc.msgctl}
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ipc_id = int(row.split()[1])
            if kind == "sem":
                rc = _libc.semctl(ipc_id, 0, _IPC_RMID, 0)
            else:
                rc = calls[kind](ipc_id, _IPC_RMID, None)
            if rc != 0:
                raise OSError(ctypes.get_errno(), f"cannot remove SysV {kind} {ipc_id}")


def clean_scratch() -> None:
    """Empty ``/tmp`` and ``/dev/shm`` and remove SysV IPC objects (processes must be gone)."""
    for root in SCRATCH_ROOTS:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _empty_dir(fd)
        finally:
            os.close(fd)
    _remove_sysv_ipc()


def run_program(code: bytes, stdin: bytes, limits: dict[str, Any]) -> tuple[dict[str, Any], bytes, bytes]:
    """Run one program in a fresh child; ``(header, stdout, stderr)`` for the host."""
    os.mkdir(WORKDIR)
    os.chmod(WORKDIR, 0o1777)
    path = os.path.join(WORKDIR, "main.py")
    with open(path, "wb") as fh:
        fh.write(code)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(path, (in_r, out_w, err_w), limits)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    out, err = _Capture(limits["max_output"]), _Capture(limits["max_output"])
    captures = {out_r: out, err_r: err}
    killed, status = _supervise(pid, start, stdin, in_w, captures, limits)
    if killed != "output_limit":
        _drain(captures, time.monotonic() + 1.0)
    for fd in captures:
        os.close(fd)
    duration = time.monotonic() - start
    if status is None or killed is not None:
        exit_code = _KILLED
    else:
        exit_code = os.waitstatus_to_exitcode(status)
        if exit_code < 0:  # died from a signal: report it as a shell (and bwrap) would
            exit_code = 128 - exit_code
    header = {
        "exit_code": exit_code,
        "stdout": out.kept,
        "stderr": err.kept,
        "stdout_truncated": out.overflow,
        "stderr_truncated": err.overflow,
        "killed": killed,
        "duration": duration,
    }
    return header, b"".join(out.chunks), b"".join(err.chunks)


def _pidfd(pid: int) -> int:
    """A pollable fd that turns readable when ``pid`` exits (Linux >= 5.3), else -1."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return -1


def _supervise(
    pid: int, start: float, stdin: bytes, in_w: int, captures: dict[int, _Capture], limits: dict[str, Any]
) -> tuple[str | None, int | None]:
    """Feed stdin and capture output until the child exits or a limit kills it; then kill the rest."""
    deadline = start + limits["wall_seconds"]
    pidfd = _pidfd(pid)
    tick = None if pidfd >= 0 else 0.002  # without a pidfd, poll for the exit
    sel = selectors.DefaultSelector()
    killed: str | None = None
    status: int | None = None
    pending = memoryview(stdin)
    try:
        if pidfd >= 0:
            sel.register(pidfd, selectors.EVENT_READ)
        for fd in captures:
            sel.register(fd, selectors.EVENT_READ)
        if pending:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
        else:
            os.close(in_w)
            in_w = -1
        while status is None and killed is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed = "wall_time"
                break
            events = sel.select(remaining if tick is None else min(remaining, tick))
            if tick is not None:
                done, st = os.waitpid(pid, os.WNOHANG)
                status = st if done else None
            for key, _ in events:
                fd = key.fd
                if fd == pidfd:
                    _, status = os.waitpid(pid, 0)
                    sel.unregister(pidfd)
                elif fd == in_w:
                    try:
                        pending = pending[os.write(fd, pending[:_CHUNK]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # EPIPE: the program exited or closed its stdin
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(fd)
                        os.close(fd)
                        in_w = -1
                elif fd in captures:
                    data = os.read(fd, _CHUNK)
                    if not data:
                        sel.unregister(fd)
                        continue
                    cap = captures[fd]
                    cap.add(data)
                    if cap.overflow and limits["kill_on_output"]:
                        killed = "output_limit"
                        break
    finally:
        sel.close()
        if pidfd >= 0:
            os.close(pidfd)
        if in_w >= 0:
            os.close(in_w)
    if not kill_all():
        raise RuntimeError(f"processes survived SIGKILL: {_other_pids()}")
    if status is None:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # already reaped by kill_all
            status = None
    return killed, status


def _drain(captures: dict[int, _Capture], deadline: float) -> None:
    """Read what is left in the output pipes (every writer is dead, so each ends in EOF)."""
    for fd, cap in captures.items():
        os.set_blocking(fd, False)
        while time.monotonic() < deadline:
            try:
                data = os.read(fd, _CHUNK)
            except BlockingIOError:
                time.sleep(0.0005)
                continue
            if not data:
                break
            cap.add(data)


# --------------------------------------------------------------------------------------------------
# Protocol


class _Reader:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()

    def _fill(self) -> bool:
        data = os.read(self.fd, _CHUNK)
        self.buf += data
        return bool(data)

    def line(self) -> bytes | None:
        while b"\n" not in self.buf:
            if not self._fill():
                return None
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        return line

    def exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError("host closed the pipe mid-message")
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


def _send(fd: int, header: dict[str, Any], *payload: bytes) -> None:
    view = memoryview(json.dumps(header).encode() + b"\n" + b"".join(payload))
    while view:
        view = view[os.write(fd, view) :]


def _inside_bwrap() -> bool:
    """Whether this is the harness bound into a sandbox: the first process under bubblewrap's init.

    It empties ``/tmp`` and SIGKILLs every process it may signal, which is only safe there.
    """
    if os.path.abspath(__file__) != HARNESS_PATH or os.getpid() != 2:
        return False
    try:
        with open("/proc/1/comm", encoding="utf-8") as fh:
            return fh.read().strip() == "bwrap"
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if not _inside_bwrap():  # it SIGKILLs every process it may signal: never outside a sandbox
        print("sandbox harness: refusing to run outside a bubblewrap pid namespace", file=sys.stderr)
        return 2
    limits = json.loads(argv[1])
    proto_in, proto_out = os.dup(0), os.dup(1)  # non-inheritable copies; 0/1 become /dev/null
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    _set_dumpable(False)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.chdir("/")
    try:
        clean_scratch()
    except OSError as exc:
        _send(proto_out, {"fatal": f"cannot prepare the scratch area: {exc!r}"})
        return 3
    reader = _Reader(proto_in)
    _send(proto_out, {"ready": os.getpid()})
    while True:
        line = reader.line()
        if line is None:  # the host is done: nothing to finalize, no program is left running
            os._exit(0)
        job = json.loads(line)
        code, stdin = reader.exact(job["code"]), reader.exact(job["stdin"])
        try:
            header, out, err = run_program(code, stdin, limits)
        except (OSError, RuntimeError) as exc:
            _send(proto_out, {"fatal": f"cannot run the program: {exc!r}"})
            return 3
        del code, stdin
        try:
            clean_scratch()
            header["clean"] = True
        except OSError as exc:
            header["clean"], header["fatal"] = False, f"cannot restore a clean scratch area: {exc!r}"
        _send(proto_out, header, out, err)
        if not header["clean"]:
            return 3
        del out, err


if __name__ == "__main__":
    sys.exit(main(sys.argv))
