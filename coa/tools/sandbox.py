"""Run untrusted, model-written Python under bubblewrap (``bwrap``), with resource limits.

Used by the teacher's ``code`` tool, by RL rollouts and by code-test scoring. The program sees:

* a fresh mount namespace whose root is a tmpfs holding only read-only binds of ``/usr`` (plus the
  ``/bin``, ``/lib*`` merged-usr symlinks), a handful of ``/etc`` files (``ld.so.cache``, localtime,
  alternatives; ``passwd``/``group``/``hosts`` are synthesized), the interpreter's installation at
  ``/opt/python`` and its virtualenv's site-packages at ``/opt/venv`` (both read-only; the venv is
  rebuilt there so it works without the project tree). Nothing of ``/root``, ``/home``, ``/work``
  or the project checkout is mounted;
* a private, size-capped tmpfs ``/tmp`` whose ``/tmp/workspace`` is the working directory (and
  ``$HOME``); the code itself is ``/tmp/workspace/main.py``. Everything is discarded on exit;
* no network (``--unshare-net``: only a loopback of its own), and private pid/ipc/uts namespaces
  (it cannot see or signal host processes);
* a clean environment (no host variables, so no API keys), one-thread BLAS/OpenMP defaults;
* a seccomp filter (``--seccomp``; x86_64 and aarch64) that refuses new user namespaces and
  foreign-ABI syscalls, so the program cannot give itself capabilities in a namespace of its own,
  and POSIX message queues and kernel keyrings (state that would outlive the program);
* rlimits set *inside* the sandbox with ``prlimit``: CPU seconds (``SIGXCPU`` then ``SIGKILL``),
  address space, processes + threads, file size, open files, no core dumps; the runner enforces
  the wall-clock limit and caps the captured stdout/stderr bytes.

How the sandbox is entered (``mode``), chosen by a self-test that tries the candidates in order:

``root-setpriv`` (the host process is real root, e.g. this container or the ``cpu`` image)
    bwrap runs privileged (no user namespace), so it can bind an interpreter that lives under
    ``/root`` (pyenv), and keeps only ``CAP_SETUID``/``CAP_SETGID`` for the sandbox's first
    process, which is ``setpriv``: it switches to a random, otherwise unused uid/gid in
    ``[uid_range)`` and drops every capability and the bounding set before ``prlimit`` and the
    interpreter start (``no_new_privs`` is set by bwrap, so setuid binaries cannot elevate).
    Why not ``--unshare-user`` as root: the sandboxed processes would still be kernel uid 0, and
    the kernel never enforces ``RLIMIT_NPROC`` for uid 0, so a fork bomb would not be contained.
    Why not "drop to ``nobody`` before bwrap": an unprivileged bwrap ``realpath``s its bind
    sources and cannot traverse ``/root`` (0700), where pyenv interpreters live. A unique uid per
    run (rather than a shared ``nobody``) keeps concurrent sandboxes from sharing one process count.
``userns`` (any other user, or root inside a non-initial user namespace, e.g. rootless containers)
    unprivileged bwrap with ``--unshare-user`` (+ ``--disable-userns`` when supported). The
    process limit is set inside the sandbox, so it is counted per user namespace (kernel >= 5.14
    ucounts) and concurrent sandboxes do not share it. Needs unprivileged user namespaces.

Both modes use ``--proc /proc`` (a procfs of the private pid namespace), ``--dev /dev`` (a minimal
/dev: null, zero, full, random, urandom, tty, pts, plus a size-capped, world-writable ``/dev/shm``
tmpfs for POSIX semaphores, i.e. ``multiprocessing``), ``--new-session`` (no TIOCSTI into the
caller's terminal) and ``--die-with-parent`` (the sandbox dies with the runner). Checked on
Debian 12 (bwrap 0.8.0, kernel 6.x) as root inside Docker: all of privileged / ``--unshare-user``
/ unprivileged ``--unshare-user`` work there; ``RLIMIT_NPROC`` is only effective in the two modes
above. bubblewrap >= 0.8 is required (``--perms``, ``--size``).

Many programs per sandbox start: with ``harness=`` (:func:`_build`) the sandbox's program is
:mod:`coa.tools.sandbox_harness` (bound read-only at :data:`HARNESS_PATH`), started exactly like a
program (same mounts, namespaces, seccomp filter; in ``root-setpriv`` mode after ``setpriv`` dropped
to the random uid), which forks one fresh process per program, applies the rlimits above to it, and
after each program kills everything it left and empties ``/tmp`` and ``/dev/shm``.
:mod:`coa.tools.harness_pool` drives it (code-test scoring, the warm pool of the ``code`` tool).

There is no fallback: when no mode passes its self-test, :func:`run_python` raises
:class:`SandboxUnavailable` with the reason and how to install or enable bubblewrap. Code is never
run unconfined.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import platform
import random
import re
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from coa.errors import InfraError

__all__ = [
    "SANDBOX_WORKDIR",
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "KilledReason",
    "clear_sandbox_cache",
    "run_python",
    "sandbox_available",
]

SANDBOX_WORKDIR = "/tmp/workspace"
"""The program's working directory (and ``$HOME``) inside the sandbox; the code is ``main.py`` there."""
HARNESS_PATH = "/opt/coa-harness/harness.py"
"""Where :mod:`coa.tools.sandbox_harness` is bound (read-only) in a harness sandbox (the harness
checks that it runs from there)."""

_INSIDE_BASE = "/opt/python"
_INSIDE_VENV = "/opt/venv"
_SYSTEM_ROOTS = ("/usr",)
_MERGED_USR = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_BINDS = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/nsswitch.conf",
    "/etc/os-release",
)

INSTALL_HINT = (
    "install bubblewrap >= 0.8: `apt-get install -y bubblewrap` (Debian/Ubuntu; the `cpu` image has "
    "it), `dnf install bubblewrap` (Fedora/RHEL) or `apk add bubblewrap` (Alpine); `prlimit` and "
    "`setpriv` come from util-linux"
)
USERNS_HINT = (
    "bubblewrap could not create its namespaces. As a non-root user it needs unprivileged user "
    "namespaces: `sysctl -w kernel.unprivileged_userns_clone=1` (Debian kernels), "
    "`sysctl -w user.max_user_namespaces=15000`, and on Ubuntu >= 23.10 "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile for bwrap). "
    "As real root, bwrap runs privileged and needs CAP_SYS_ADMIN (root in a Docker container "
    "lacks it by default: add `--cap-add SYS_ADMIN`, or run the worker as a non-root user). Docker's "
    "default seccomp/AppArmor profiles also block namespace creation: run the container with "
    "`--security-opt seccomp=unconfined --security-opt apparmor=unconfined`"
)

Mode = Literal["root-setpriv", "userns"]
KilledReason = Literal[
    "wall_time", "cpu_time", "memory", "process_limit", "file_size", "output_limit", "signal"
]


class SandboxUnavailable(InfraError, RuntimeError):
    """No working sandbox on this machine; the message says why and how to install/enable one."""


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Limits and binaries for one sandboxed run. All limits apply per run.

    Attributes:
        cpu_seconds: CPU-time limit per process (``RLIMIT_CPU``; rounded up to whole seconds).
            ``SIGXCPU`` at the limit, ``SIGKILL`` one second later.
        wall_seconds: wall-clock limit for the whole run, sandbox start-up included; the sandbox
            is killed when it is reached (``timed_out``, ``killed_reason="wall_time"``).
        memory_mb: address-space limit per process (``RLIMIT_AS``), in MiB. Allocations beyond it
            fail (``MemoryError`` in Python). Virtual, not resident, memory: keep it generous for
            numpy/torch imports.
        max_processes: processes + threads the program may have at once (``RLIMIT_NPROC``,
            counted for the sandbox's own uid / user namespace); the interpreter itself counts as 1.
        max_file_mb: largest file the program may write (``RLIMIT_FSIZE``), in MiB.
        scratch_mb: size of the private tmpfs ``/tmp`` (which holds the working directory), MiB.
        max_output_bytes: bytes of stdout and of stderr kept (each); the rest is dropped and the
            ``*_truncated`` flag set.
        kill_on_output_limit: kill the program as soon as a stream passes ``max_output_bytes``
            (``killed_reason="output_limit"``) instead of draining and discarding until it exits.
        max_open_files: open file descriptors per process (``RLIMIT_NOFILE``).
        python: host interpreter whose installation (and virtualenv site-packages) is mounted
            read-only and runs the code. Defaults to the interpreter running this module.
        bwrap: the bubblewrap binary (a name looked up on ``PATH``, or a path).
        uid_range: ``[lo, hi)`` from which ``root-setpriv`` mode draws the sandbox's uid/gid.
        env: extra environment variables for the program (the host environment is never passed).
    """

    cpu_seconds: float = 10.0
    wall_seconds: float = 20.0
    memory_mb: int = 4096
    max_processes: int = 64
    max_file_mb: int = 64
    scratch_mb: int = 256
    max_output_bytes: int = 4 * 1024 * 1024
    kill_on_output_limit: bool = True
    max_open_files: int = 512
    python: str = sys.executable
    bwrap: str = "bwrap"
    uid_range: tuple[int, int] = (1_000_000_000, 2_000_000_000)
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        positive = (
            "cpu_seconds",
            "wall_seconds",
            "memory_mb",
            "max_processes",
            "max_file_mb",
            "scratch_mb",
            "max_output_bytes",
            "max_open_files",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxConfig.{name} must be > 0, got {getattr(self, name)!r}")
        lo, hi = self.uid_range
        if not 0 < lo < hi <= 2**32 - 2:
            raise ValueError(f"SandboxConfig.uid_range must satisfy 0 < lo < hi, got {self.uid_range}")
        if not self.python:
            raise ValueError("SandboxConfig.python is empty (sys.executable unknown?)")


@dataclasses.dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run produced.

    ``exit_code`` is the program's exit status; ``128 + N`` when it died from signal ``N`` inside
    the sandbox (e.g. 152 = ``SIGXCPU``), ``-9`` when the runner killed the sandbox (wall time or
    output limit). ``killed_reason`` names the limit that ended the run (``memory``/``process_limit``
    /``file_size`` are inferred from the error the program died with). ``stdout``/``stderr`` are
    decoded as UTF-8 (invalid bytes replaced) and hold at most ``max_output_bytes`` each.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    killed_reason: KilledReason | None = None
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        """Exited with status 0 within the limits."""
        return self.exit_code == 0 and not self.timed_out and self.killed_reason is None

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated


# --------------------------------------------------------------------------------------------------
# Host probing (cached)


@dataclasses.dataclass(frozen=True)
class _Interpreter:
    executable: str  # realpath of the host binary
    base_prefix: str
    prefix: str
    version: str  # "3.11"
    site_packages: tuple[str, ...]
    libdir: str | None
    venv_system_site: bool


_PROBE = (
    "import json, os, site, sys, sysconfig\n"
    "print(json.dumps({'executable': os.path.realpath(sys.executable),"
    " 'base_prefix': os.path.realpath(sys.base_prefix), 'prefix': os.path.realpath(sys.prefix),"
    " 'version': '%d.%d' % sys.version_info[:2], 'site': site.getsitepackages(),"
    " 'libdir': sysconfig.get_config_var('LIBDIR')}))\n"
)


@functools.lru_cache(maxsize=16)
def _probe_interpreter(python: str) -> _Interpreter:
    exe = shutil.which(python) if os.sep not in python else python
    if not exe or not os.path.exists(exe):
        raise SandboxUnavailable(f"python interpreter {python!r} for the sandbox not found")
    try:
        out = subprocess.run(
            [exe, "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={"PATH": "/usr/bin:/bin"},
        ).stdout
        info = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        raise SandboxUnavailable(f"cannot inspect the sandbox interpreter {exe!r}: {e}") from e
    prefix, base = info["prefix"], info["base_prefix"]
    system_site = False
    if prefix != base:
        try:
            with open(os.path.join(prefix, "pyvenv.cfg"), encoding="utf-8") as fh:
                cfg = dict(
                    (k.strip().lower(), v.strip()) for k, _, v in (line.partition("=") for line in fh) if _
                )
            system_site = cfg.get("include-system-site-packages", "false").lower() == "true"
        except OSError:
            pass
    libdir = info.get("libdir")
    return _Interpreter(
        executable=info["executable"],
        base_prefix=base,
        prefix=prefix,
        version=info["version"],
        site_packages=tuple(os.path.realpath(p) for p in info["site"] if os.path.isdir(p)),
        libdir=os.path.realpath(libdir) if libdir else None,
        venv_system_site=system_site,
    )


@functools.lru_cache(maxsize=16)
def _bwrap_features(bwrap: str) -> tuple[str, frozenset[str]]:
    """``(version, supported options)`` of a bwrap binary (from ``--version`` and ``--help``)."""
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise SandboxUnavailable(f"cannot run {bwrap}: {e}; {INSTALL_HINT}") from e
    opts = frozenset(re.findall(r"^\s+(--[a-z0-9-]+)", helptext, flags=re.MULTILINE))
    return version.strip(), opts


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _in_initial_userns() -> bool:
    try:
        with open("/proc/self/uid_map", encoding="ascii") as fh:
            return fh.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return True


def _candidate_modes() -> tuple[Mode, ...]:
    if os.geteuid() == 0 and _in_initial_userns():
        # userns as real root would leave RLIMIT_NPROC unenforced (uid 0 is exempt): not a candidate.
        return ("root-setpriv",)
    if os.geteuid() == 0:
        return ("root-setpriv", "userns")
    return ("userns",)


# --------------------------------------------------------------------------------------------------
# Command construction


class _Plan:
    """bwrap arguments plus the data fds they reference (memfds, closed after the start)."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.fds: list[int] = []
        self._dirs: set[str] = {"/"}
        # bwrap writes {"child-pid": <host pid of the sandbox's pid 1>} here (see _await_teardown).
        self.info_read, info_write = os.pipe()
        self.fds.append(info_write)
        self.args += ["--info-fd", str(info_write)]

    def mkdirs(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            if d not in self._dirs:
                self._dirs.add(d)
                self.args += ["--perms", "0755", "--dir", d]

    def ro_bind(self, src: str, dest: str) -> None:
        self.mkdirs(os.path.dirname(dest))
        if os.path.isdir(src):
            self.mkdirs(dest)
        self.args += ["--ro-bind", src, dest]

    def memfd(self, content: bytes) -> int:
        """An fd (inherited by bwrap) from which ``content`` can be read."""
        fd = os.memfd_create("coa-sandbox", 0)
        self.fds.append(fd)
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

    def data(self, content: bytes, dest: str, perms: str = "0644", op: str = "--ro-bind-data") -> None:
        fd = self.memfd(content)
        self.mkdirs(os.path.dirname(dest))
        self.args += ["--perms", perms, op, str(fd), dest]

    def close(self) -> None:
        """Close the fds handed to bwrap (call once it has started, or on failure)."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def sandbox_pid(self) -> int | None:
        """The sandbox's pid 1 as reported on the info fd (once bwrap has exited); closes the fd."""
        try:
            os.set_blocking(self.info_read, False)
            data = os.read(self.info_read, 65536)
        except OSError:
            data = b""
        finally:
            with contextlib.suppress(OSError):
                os.close(self.info_read)
        m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
        return int(m.group(1)) if m else None


def _env(config: SandboxConfig, path_dirs: Sequence[str], ld_path: str | None) -> dict[str, str]:
    env = {
        "PATH": ":".join([*path_dirs, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": SANDBOX_WORKDIR,
        "TMPDIR": "/tmp",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
        "HF_HUB_OFFLINE": "1",
    }
    if ld_path:
        env["LD_LIBRARY_PATH"] = ld_path
    env.update(dict(config.env))
    return env


def _build(
    config: SandboxConfig, mode: Mode, code: bytes, harness: bytes | None = None
) -> tuple[list[str], _Plan]:
    """The full command line (bwrap, its options, the in-sandbox command) and its data fds.

    With ``harness`` (the source of :mod:`coa.tools.sandbox_harness`) the sandbox runs that harness
    instead of ``code``: it waits for programs on its stdin and applies the limits per program.
    """
    bwrap = _resolve_bwrap(config.bwrap)
    version, opts = _bwrap_features(bwrap)
    missing = [o for o in ("--perms", "--size", "--die-with-parent", "--ro-bind-data") if o not in opts]
    if missing:
        raise SandboxUnavailable(f"{bwrap} ({version or 'unknown version'}) lacks {missing}; {INSTALL_HINT}")
    interp = _probe_interpreter(config.python)
    plan = _Plan()
    try:
        return _assemble(config, mode, code, harness, bwrap, opts, interp, plan), plan
    except BaseException:
        plan.close()
        plan.sandbox_pid()
        raise


def _assemble(
    config: SandboxConfig,
    mode: Mode,
    code: bytes,
    harness: bytes | None,
    bwrap: str,
    opts: frozenset[str],
    interp: _Interpreter,
    plan: _Plan,
) -> list[str]:
    a = plan.args
    a += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox"]
    if "--unshare-cgroup-try" in opts:
        a.append("--unshare-cgroup-try")
    if mode == "userns":
        a.append("--unshare-user")
        if "--disable-userns" in opts:
            a.append("--disable-userns")
    a += ["--die-with-parent", "--new-session", "--clearenv"]
    seccomp = _seccomp_filter()
    if seccomp is not None and "--seccomp" in opts:
        a += ["--seccomp", str(plan.memfd(seccomp))]

    # System: /usr read-only; /bin, /lib*, ... as the same symlinks (merged /usr) or binds.
    roots = list(_SYSTEM_ROOTS)
    for root in _SYSTEM_ROOTS:
        plan.ro_bind(root, root)
    for p in _MERGED_USR:
        if os.path.islink(p):
            a += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            plan.ro_bind(p, p)
            roots.append(p)
    a += ["--proc", "/proc", "--dev", "/dev"]
    # bwrap's /dev/shm is root-owned 0755 in privileged mode; POSIX semaphores (multiprocessing) need it.
    a += ["--perms", "1777", "--size", str(config.scratch_mb * 1024 * 1024), "--tmpfs", "/dev/shm"]
    plan.mkdirs("/etc")
    for p in _ETC_BINDS:
        if os.path.exists(p):
            plan.ro_bind(os.path.realpath(p), p)

    # The interpreter: its installation at the same path when it is under /usr, else /opt/python.
    base = interp.base_prefix
    if not _under(interp.executable, [base]):
        raise SandboxUnavailable(
            f"interpreter {interp.executable} is not inside its installation {base}; "
            "point SandboxConfig.python at a regular CPython installation or virtualenv"
        )
    relocated = not _under(base, roots)
    inside_base = _INSIDE_BASE if relocated else base
    inside_exe = inside_base + interp.executable[len(base) :]
    if relocated:
        plan.ro_bind(base, inside_base)
    ld_path = None
    if relocated and interp.libdir and _under(interp.libdir, [base]):
        ld_path = inside_base + interp.libdir[len(base) :]  # a RUNPATH into /root/.pyenv would miss
    run_exe, path_dirs = inside_exe, [os.path.dirname(inside_exe)]
    if interp.prefix != base:
        # Rebuild the virtualenv at /opt/venv: pyvenv.cfg + bin/python + its site-packages only
        # (the real venv may sit inside the project tree, which must stay invisible).
        cfg = (
            f"home = {os.path.dirname(inside_exe)}\n"
            f"include-system-site-packages = {'true' if interp.venv_system_site else 'false'}\n"
            f"version = {interp.version}\n"
        )
        plan.data(cfg.encode(), f"{_INSIDE_VENV}/pyvenv.cfg")
        plan.mkdirs(f"{_INSIDE_VENV}/bin")
        for name in ("python", "python3", f"python{interp.version}"):
            a += ["--symlink", inside_exe, f"{_INSIDE_VENV}/bin/{name}"]
        for sp in interp.site_packages:
            if _under(sp, [interp.prefix]):
                plan.ro_bind(sp, _INSIDE_VENV + sp[len(interp.prefix) :])
        run_exe, path_dirs = f"{_INSIDE_VENV}/bin/python", [f"{_INSIDE_VENV}/bin", *path_dirs]

    # Identity files (synthesized: no host accounts leak in).
    uid = gid = os.getuid()
    if mode == "root-setpriv":
        uid = gid = random.SystemRandom().randrange(*config.uid_range)
    plan.data(
        f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:{SANDBOX_WORKDIR}:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
        "/etc/passwd",
    )
    plan.data(f"root:x:0:\nsandbox:x:{gid}:\nnogroup:x:65534:\n".encode(), "/etc/group")
    plan.data(b"127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n", "/etc/hosts")

    # Scratch: a private, size-capped tmpfs /tmp holding the working directory and the code.
    a += ["--perms", "1777", "--size", str(config.scratch_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    plan._dirs.add("/tmp")
    if harness is None:
        a += ["--perms", "1777", "--dir", SANDBOX_WORKDIR]
        plan._dirs.add(SANDBOX_WORKDIR)
        plan.data(code, f"{SANDBOX_WORKDIR}/main.py", perms="0644", op="--file")
        a += ["--chdir", SANDBOX_WORKDIR]
    else:  # the harness creates the working directory afresh for each program
        plan.data(harness, HARNESS_PATH, perms="0644")
        a += ["--chdir", "/"]

    for k, v in _env(config, path_dirs, ld_path).items():
        a += ["--setenv", k, v]

    inner: list[str] = []
    nproc = config.max_processes
    if mode == "root-setpriv":
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        inner += [
            "/usr/bin/setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ]
    else:
        nproc += 1  # bwrap's pid-1 reaper lives in the same user namespace and counts
    cpu = max(1, int(-(-config.cpu_seconds // 1)))
    mem = config.memory_mb * 1024 * 1024
    fsize = config.max_file_mb * 1024 * 1024
    if harness is not None:
        limits = {
            "cpu_seconds": cpu,
            "memory_bytes": mem,
            "nproc": nproc + 1,  # the harness runs as the programs' uid and counts too
            "file_bytes": fsize,
            "nofile": config.max_open_files,
            "wall_seconds": config.wall_seconds,
            "max_output": config.max_output_bytes,
            "kill_on_output": config.kill_on_output_limit,
        }
        return [bwrap, *a, "--", *inner, run_exe, HARNESS_PATH, json.dumps(limits)]
    inner += [
        "/usr/bin/prlimit",
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={mem}:{mem}",
        f"--nproc={nproc}:{nproc}",
        f"--fsize={fsize}:{fsize}",
        f"--nofile={config.max_open_files}:{config.max_open_files}",
        "--core=0:0",
        "--",
        run_exe,
        "main.py",
    ]
    return [bwrap, *a, "--", *inner]


# Classic-BPF seccomp filter: deny creating user namespaces (unshare/clone with CLONE_NEWUSER;
# clone3, whose flags live in memory a filter cannot read, answers ENOSYS so libc falls back to
# clone), and every syscall of a foreign ABI (i386 / x32 on x86_64). Everything else is allowed.
# In root-setpriv mode this is what stops the program from gaining capabilities in a user
# namespace of its own (``--disable-userns`` needs ``--unshare-user``); in userns mode it doubles it.
# POSIX message queues and kernel keyrings answer ENOSYS too: they are kernel objects that outlive
# the process that made them and that the harness cannot list and remove, so one program could
# leave state for the next program of the same sandbox (see coa.tools.sandbox_harness).
_CLONE_NEWUSER = 0x10000000
_SECCOMP_ARCH = {  # machine -> (AUDIT_ARCH_*, clone, unshare, clone3, reject nr >= this, refused)
    # refused: mq_open, add_key, request_key, keyctl
    "x86_64": (0xC000003E, 56, 272, 435, 0x40000000, (240, 248, 249, 250)),
    "aarch64": (0xC00000B7, 220, 97, 435, None, (180, 217, 218, 219)),
}


def _seccomp_filter() -> bytes | None:
    spec = _SECCOMP_ARCH.get(platform.machine())
    if spec is None:
        return None
    arch, nr_clone, nr_unshare, nr_clone3, foreign_nr, refused = spec
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to forward offsets.
    prog: list[tuple[int, str | None, str | None, int]] = [
        (ld, None, None, 4),  # seccomp_data.arch
        (jeq, None, "enosys", arch),
        (ld, None, None, 0),  # seccomp_data.nr
    ]
    if foreign_nr is not None:
        prog.append((jge, "enosys", None, foreign_nr))
    prog += [(jeq, "enosys", None, nr) for nr in refused]
    prog += [
        (jeq, "enosys", None, nr_clone3),
        (jeq, "flags", None, nr_unshare),
        (jeq, "flags", "allow", nr_clone),
    ]
    labels = {"flags": len(prog), "allow": len(prog) + 2, "eperm": len(prog) + 3, "enosys": len(prog) + 4}
    prog += [
        (ld, None, None, 16),  # low 32 bits of args[0] (little endian): the clone/unshare flags
        (jset, "eperm", "allow", _CLONE_NEWUSER),
        (ret, None, None, allow),
        (ret, None, None, eperm),
        (ret, None, None, enosys),
    ]
    out = bytearray()
    for i, (code, jt, jf, k) in enumerate(prog):
        t = labels[jt] - i - 1 if jt else 0
        f = labels[jf] - i - 1 if jf else 0
        out += struct.pack("=HBBI", code, t, f, k)
    return bytes(out)


def _resolve_bwrap(bwrap: str) -> str:
    found = shutil.which(bwrap)
    if not found:
        raise SandboxUnavailable(f"bubblewrap not found ({bwrap!r} is not an executable); {INSTALL_HINT}")
    return found


# --------------------------------------------------------------------------------------------------
# Running


class _Capture:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - self.kept
        if room > 0:
            piece = data[:room]
            self.chunks.append(piece)
            self.kept += len(piece)

    @property
    def overflow(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def _execute(cmd: list[str], plan: _Plan, stdin: bytes, config: SandboxConfig) -> SandboxResult:
    start = time.monotonic()
    deadline = start + config.wall_seconds
    proc = spawn(cmd, plan)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err = _Capture(config.max_output_bytes), _Capture(config.max_output_bytes)
    captures = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    killed: KilledReason | None = None
    sel = selectors.DefaultSelector()
    try:
        for f in (proc.stdout, proc.stderr):
            sel.register(f.fileno(), selectors.EVENT_READ)
        pending = memoryview(stdin)
        stdin_fd = proc.stdin.fileno()
        if pending:
            os.set_blocking(stdin_fd, False)
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()  # the program reads EOF at once: input() cannot hang
        while sel.get_map() and killed is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                killed = "wall_time"
                break
            for key, _ in sel.select(remaining):
                fd = key.fd
                if fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[:65536]) :]
                    except BlockingIOError:
                        continue
                    except OSError:  # EPIPE: the program exited or closed its stdin
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()
                    continue
                data = os.read(fd, 65536)
                if not data:
                    sel.unregister(fd)
                    continue
                cap = captures[fd]
                cap.add(data)
                if cap.overflow and config.kill_on_output_limit:
                    killed = "output_limit"
                    break
        status: int | None = None
        while killed is None:  # pipes closed: wait for the exit, still within the wall time
            pid, st = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                status = st
                break
            if time.monotonic() >= deadline:
                killed = "wall_time"
                break
            time.sleep(0.005)
        if status is None:
            proc.kill()  # SIGKILL bwrap; --die-with-parent + pid-namespace teardown kill the rest
            _, status = os.waitpid(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        sel.close()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                f.close()
        if proc.returncode is None:  # an exception escaped: never leave a sandbox running
            proc.kill()
            proc.wait()
        _await_teardown(plan.sandbox_pid())
    duration = time.monotonic() - start
    code = proc.returncode
    stdout_text, stderr_text = out.text(), err.text()
    if killed is None and code != 0:
        killed = _infer_reason(code, stderr_text)
    return SandboxResult(
        exit_code=code,
        stdout=stdout_text,
        stderr=stderr_text,
        timed_out=killed in ("wall_time", "cpu_time"),
        killed_reason=killed,
        duration_s=duration,
        stdout_truncated=out.overflow,
        stderr_truncated=err.overflow,
    )


def _proc_state(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of a host pid, or ``None`` when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], fields[19]


def _await_teardown(pid1: int | None, timeout: float = 2.0) -> None:
    """Wait until the sandbox's pid 1 is a zombie or gone, i.e. every sandboxed process has died.

    bwrap's outer process exits as soon as the program's exit status is known, while the kernel is
    still killing the rest of the pid namespace. The namespace's init only turns into a zombie after
    that teardown (``zap_pid_ns_processes``), so waiting for it means nothing the program started
    outlives :func:`run_python`.
    """
    if pid1 is None:
        return
    first = _proc_state(pid1)
    deadline = time.monotonic() + timeout
    while first is not None and time.monotonic() < deadline:
        now = _proc_state(pid1)
        if now is None or now[0] in ("Z", "X") or now[1] != first[1]:
            return
        time.sleep(0.002)


_MEMORY_PAT = re.compile(r"^MemoryError\b|Cannot allocate memory|std::bad_alloc|out of memory", re.MULTILINE)
_NPROC_PAT = re.compile(
    r"Resource temporarily unavailable|can't start new thread|Cannot fork|fork: retry", re.MULTILINE
)
_FSIZE_PAT = re.compile(r"\[Errno 27\]|File too large", re.MULTILINE)


def _infer_reason(code: int, stderr: str) -> KilledReason | None:
    """Which limit a non-zero exit most likely came from (signals are exact, the rest read stderr)."""
    if code == 128 + signal.SIGXCPU:
        return "cpu_time"
    tail = stderr[-4000:]
    if _MEMORY_PAT.search(tail):
        return "memory"
    if _NPROC_PAT.search(tail):
        return "process_limit"
    if code == 128 + signal.SIGXFSZ or _FSIZE_PAT.search(tail):
        return "file_size"
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        return "signal"
    return None


# --------------------------------------------------------------------------------------------------
# Availability


_SELFTEST_CODE = b"""\
import os
assert os.getuid() != 0 and os.geteuid() != 0, "sandboxed code runs as root"
with open("selftest.txt", "w") as fh:
    fh.write("ok")
print("sandbox-ok", open("selftest.txt").read())
"""

_lock = threading.Lock()
_modes: dict[tuple[str, str], tuple[Mode | None, str]] = {}


def _select_mode(config: SandboxConfig) -> tuple[Mode | None, str]:
    """Run the self-test for each candidate mode once per (bwrap, python); cache the outcome."""
    key = (config.bwrap, config.python)
    with _lock:
        if key in _modes:
            return _modes[key]
    outcome = _self_test(config)
    with _lock:
        _modes[key] = outcome
    return outcome


def _self_test(config: SandboxConfig) -> tuple[Mode | None, str]:
    try:
        bwrap = _resolve_bwrap(config.bwrap)
        version, _ = _bwrap_features(bwrap)
    except SandboxUnavailable as e:
        return None, str(e)
    for tool in ("/usr/bin/prlimit", "/usr/bin/setpriv"):
        if not os.access(tool, os.X_OK):
            return None, f"{tool} is missing; install util-linux (`apt-get install -y util-linux`)"
    probe = dataclasses.replace(
        config,
        cpu_seconds=10,
        wall_seconds=30,
        memory_mb=max(config.memory_mb, 1024),
        max_processes=max(config.max_processes, 8),
        kill_on_output_limit=True,
    )
    failures = []
    for mode in _candidate_modes():
        try:
            cmd, plan = _build(probe, mode, _SELFTEST_CODE)
            res = _execute(cmd, plan, b"", probe)
        except SandboxUnavailable as e:
            return None, str(e)
        except OSError as e:
            failures.append(f"{mode}: {e}")
            continue
        if res.ok and res.stdout.strip() == "sandbox-ok ok":
            return mode, f"{version} ({bwrap}), mode {mode}: self-test passed in {res.duration_s:.2f} s"
        detail = (res.stderr.strip() or res.stdout.strip() or f"exit {res.exit_code}")[-600:]
        failures.append(f"{mode}: exit {res.exit_code}: {detail}")
    return None, (
        f"{version} ({bwrap}) is installed but its self-test failed ({'; '.join(failures)}). {USERNS_HINT}"
    )


def sandbox_available(config: SandboxConfig | None = None) -> tuple[bool, str]:
    """``(True, description)`` when sandboxed runs work here, else ``(False, reason + how to fix)``.

    Runs a cheap self-test (one sandboxed ``print``) the first time for a given bwrap and
    interpreter, and caches the outcome for the life of the process (:func:`clear_sandbox_cache`).
    """
    mode, message = _select_mode(config or SandboxConfig())
    return mode is not None, message


def clear_sandbox_cache() -> None:
    """Forget self-test and probe results (e.g. after installing bubblewrap)."""
    with _lock:
        _modes.clear()
    _probe_interpreter.cache_clear()
    _bwrap_features.cache_clear()


def run_python(code: str, stdin: str = "", config: SandboxConfig | None = None) -> SandboxResult:
    """Run ``code`` as ``main.py`` in a fresh sandbox, feeding it ``stdin``; never unconfined.

    Raises :class:`SandboxUnavailable` (with install/enable instructions) when no sandbox works on
    this machine. Limits hit by the program are reported in the result, not raised.
    """
    config = config or SandboxConfig()
    mode, message = _select_mode(config)
    if mode is None:
        raise SandboxUnavailable(f"refusing to run code without a sandbox: {message}")
    cmd, plan = _build(config, mode, code.encode("utf-8", errors="surrogatepass"))
    return _execute(cmd, plan, stdin.encode("utf-8", errors="surrogatepass"), config)


def spawn(cmd: list[str], plan: Any) -> subprocess.Popen[bytes]:
    """Start a built sandbox command with pipes, its own session and a minimal environment; the
    plan's file descriptors are closed in this process once the child holds them (also on failure)."""
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=plan.fds,
            start_new_session=True,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        )
    except BaseException:
        plan.close()
        plan.sandbox_pid()
        raise
    plan.close()
    return proc
