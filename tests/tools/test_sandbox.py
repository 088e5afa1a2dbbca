"""The bubblewrap sandbox: confinement (network, files, processes) and limits actually hold.

Every confinement and limit test runs on the three ways a program is run: ``direct`` (a sandbox of
its own, :func:`run_python`), ``harness`` (a later program in a harness sandbox, as code-test
scoring runs them: :class:`ProgramRunner`) and ``pool`` (a warm sandbox of a :class:`SandboxPool`, as
the code tool runs them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coa.tools import harness_host, sandbox
from coa.tools.code import IOTest, code_tool, run_tests, run_tests_batch
from coa.tools.harness_host import HarnessSandbox
from coa.tools.harness_pool import ProgramRunner, SandboxPool, close_shared_pools
from coa.tools.sandbox import (
    SandboxConfig,
    SandboxResult,
    SandboxUnavailable,
    run_python,
    sandbox_available,
)
from tests.tools.support import FAST, requires_sandbox

# The leftover-process checks scan every process of the sandbox uid range on the machine, and the limits
# tests time their sandboxes: alone, after the parallel part of `make test`.
pytestmark = pytest.mark.serial

REPO = Path(__file__).resolve().parents[2]

Run = Callable[..., SandboxResult]


def _direct(code: str, stdin: str = "", config: SandboxConfig = FAST) -> SandboxResult:
    return run_python(code, stdin=stdin, config=config)


def _harness(code: str, stdin: str = "", config: SandboxConfig = FAST) -> SandboxResult:
    """The program as the second one of a harness sandbox (after another program ran there)."""
    with ProgramRunner(config) as runner:
        before = runner.run("open('/tmp/before', 'w').write('x'); print('previous program')")
        assert before.ok and before.stdout == "previous program\n", before
        return runner.run(code, stdin)


def _pooled(code: str, stdin: str = "", config: SandboxConfig = FAST) -> SandboxResult:
    """The program in a sandbox that a pool started ahead of the call."""
    with SandboxPool(config, size=1) as pool:
        assert pool.wait_ready(), pool.last_error
        result = pool.run(code, stdin)
        assert (pool.hits, pool.misses) == (1, 0)
        return result


def _reused(code: str, stdin: str = "", config: SandboxConfig = FAST) -> SandboxResult:
    """The program as the second call of a pool that reuses its sandboxes (the code tool's)."""
    with SandboxPool(config, size=1, programs_per_sandbox=8) as pool:
        assert pool.wait_ready(), pool.last_error
        before = pool.run("open('/tmp/before', 'w').write('x'); print('previous call')")
        assert before.ok and before.stdout == "previous call\n", before
        result = pool.run(code, stdin)
        assert (pool.hits, pool.misses, pool.reuses) == (2, 0, 1)
        return result


PATHS = {"direct": _direct, "harness": _harness, "pool": _pooled, "reused": _reused}


@pytest.fixture(params=sorted(PATHS))
def run(request: pytest.FixtureRequest) -> Run:
    """``run(code, stdin="", config=FAST) -> SandboxResult`` on each of the three paths."""
    return PATHS[request.param]


@pytest.fixture(autouse=True)
def _no_warm_sandboxes_from_elsewhere() -> None:
    """Close the code tool's shared pools (other tests may have used it): their warm sandboxes run
    as uids of the sandbox range and would count as leftovers below."""
    close_shared_pools()


def _leftover_sandbox_processes(config: SandboxConfig, wait_s: float = 3.0) -> list[int]:
    """Host pids running as a uid from the sandbox uid range (root-setpriv mode).

    Polls up to ``wait_s`` for processes the kernel is still tearing down (a killed pid namespace
    takes a moment on a loaded machine); zombies do not count.
    """
    deadline = time.monotonic() + wait_s
    while True:
        pids = _sandbox_pids(config)
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def _sandbox_pids(config: SandboxConfig) -> list[int]:
    lo, hi = config.uid_range
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        uid_line = next((line for line in status.splitlines() if line.startswith("Uid:")), "")
        state = next((line for line in status.splitlines() if line.startswith("State:")), "")
        if "Z" in state.split()[1:2]:
            continue
        if any(lo <= int(u) < hi for u in uid_line.split()[1:]):
            pids.append(int(entry))
    return pids


# --------------------------------------------------------------------------------------------------
# Basics


@requires_sandbox
def test_normal_program_prints(run: Run) -> None:
    r = run("print('hello', 6 * 7)", config=FAST)
    assert r.ok, r
    assert r.exit_code == 0
    assert r.stdout == "hello 42\n"
    assert r.stderr == ""
    assert not r.timed_out and r.killed_reason is None and not r.truncated
    assert 0 < r.duration_s < FAST.wall_seconds


@requires_sandbox
def test_stdin_is_fed_to_the_program(run: Run) -> None:
    code = "import sys\nn = int(input())\nprint(sum(int(x) for x in sys.stdin.read().split()[:n]))"
    r = run(code, stdin="3\n10 20 30 40\n", config=FAST)
    assert r.ok, r
    assert r.stdout.strip() == "60"


@requires_sandbox
def test_large_stdin_round_trips(run: Run) -> None:
    data = "x" * 1_000_000 + "\n"
    r = run("import sys; d = sys.stdin.read(); print(len(d), d[:3])", stdin=data, config=FAST)
    assert r.ok, r
    assert r.stdout.split() == ["1000001", "xxx"]


@requires_sandbox
def test_input_without_stdin_sees_eof_instead_of_hanging(run: Run) -> None:
    r = run("input('number? ')", config=FAST)
    assert r.exit_code == 1
    assert "EOFError" in r.stderr
    assert not r.timed_out


@requires_sandbox
def test_exit_status_and_streams_are_separate(run: Run) -> None:
    r = run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)", config=FAST)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.ok and r.killed_reason is None


@requires_sandbox
def test_runs_as_unprivileged_user_with_clean_environment(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COA_SANDBOX_SECRET", "hunter2")
    code = "import os\nprint(os.getuid(), os.geteuid())\nprint(os.environ.get('COA_SANDBOX_SECRET'))"
    r = run(code, config=FAST)
    assert r.ok, r
    uid, euid = map(int, r.stdout.splitlines()[0].split())
    assert uid != 0 and euid != 0
    assert r.stdout.splitlines()[1] == "None"


@requires_sandbox
def test_interpreter_site_packages_are_usable(run: Run) -> None:
    pytest.importorskip("numpy")
    r = run("import numpy as np\nprint(int(np.arange(10).sum()))", config=SandboxConfig(wall_seconds=60))
    assert r.ok, r
    assert r.stdout.strip() == "45"


@requires_sandbox
def test_multiprocessing_works_inside(run: Run) -> None:
    code = textwrap.dedent(
        """
        import multiprocessing as mp
        if __name__ == "__main__":
            with mp.Pool(2) as pool:
                print(pool.map(abs, [-1, -2, 3]))
        """
    )
    r = run(code, config=dataclasses.replace(FAST, wall_seconds=20))
    assert r.ok, r
    assert r.stdout.strip() == "[1, 2, 3]"


# --------------------------------------------------------------------------------------------------
# Isolation


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's 127.0.0.1; yields (port, list of accepted peers)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = srv.accept()
            except OSError:
                continue
            accepted.append(str(peer))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1], accepted
    stop.set()
    thread.join(2)
    srv.close()


@requires_sandbox
def test_cannot_reach_a_server_on_the_host_loopback(run: Run, host_server: tuple[int, list[str]]) -> None:
    port, accepted = host_server
    socket.create_connection(("127.0.0.1", port), timeout=2).close()  # control: it does listen
    code = textwrap.dedent(
        f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
            print("CONNECTED")
        except OSError as e:
            print("blocked", type(e).__name__)
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    assert r.stdout.startswith("blocked"), r.stdout
    assert len(accepted) == 1  # only the host's own control connection got through


@requires_sandbox
def test_no_external_network_and_no_dns(run: Run) -> None:
    code = textwrap.dedent(
        """
        import socket
        print(socket.if_nameindex())
        for target in [("1.1.1.1", 53), ("8.8.8.8", 443)]:
            try:
                socket.create_connection(target, timeout=2)
                print("CONNECTED", target)
            except OSError as e:
                print("blocked", e.errno)
        try:
            print("RESOLVED", socket.getaddrinfo("pypi.org", 443))
        except OSError:
            print("no dns")
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert lines[0] == "[(1, 'lo')]"  # only the sandbox's own loopback
    assert all(line.startswith("blocked") for line in lines[1:3]), lines
    assert lines[3] == "no dns"


@requires_sandbox
def test_writing_outside_the_scratch_dir_fails(run: Run, tmp_path: Path) -> None:
    host_target = tmp_path / "escaped.txt"  # a host path that exists and is writable from the host
    targets = [
        "/usr/escaped",
        "/etc/escaped",
        "/opt/venv/escaped",
        "/escaped",
        str(host_target),
        str(REPO / "escaped.txt"),
        "/proc/sys/kernel/hostname",
    ]
    code = textwrap.dedent(
        f"""
        import os
        for path in {targets!r}:
            try:
                with open(path, "w") as fh:
                    fh.write("x")
                print("WROTE", path)
            except OSError as e:
                print("denied", path, e.errno)
        for path in ["/tmp/ok.txt", "ok.txt", os.path.expanduser("~/ok.txt")]:
            with open(path, "w") as fh:
                fh.write("fine")
            print("scratch", path)
        print(os.getcwd())
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    assert "WROTE" not in r.stdout, r.stdout
    assert r.stdout.count("denied") == len(targets)
    assert r.stdout.count("scratch") == 3
    assert r.stdout.splitlines()[-1] == sandbox.SANDBOX_WORKDIR
    assert not host_target.exists()
    assert not (REPO / "escaped.txt").exists()


@requires_sandbox
def test_host_home_and_project_tree_are_invisible(run: Run) -> None:
    secret_paths = [
        "/root",
        "/home",
        "/work",
        str(REPO),
        str(REPO / "pyproject.toml"),
        str(Path(sys.prefix) / "pyvenv.cfg"),
        "/etc/shadow",
    ]
    code = textwrap.dedent(
        f"""
        import os
        for path in {secret_paths!r}:
            try:
                if os.path.isdir(path):
                    print("LISTED", path, os.listdir(path))
                else:
                    print("READ", path, open(path).read()[:20])
            except OSError as e:
                print("hidden", path, e.errno)
        print(sorted(os.listdir("/")))
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    assert "LISTED" not in r.stdout and "READ" not in r.stdout, r.stdout
    assert r.stdout.count("hidden") == len(secret_paths)
    top = r.stdout.splitlines()[-1]
    assert "'root'" not in top and "'home'" not in top and "'work'" not in top


@requires_sandbox
def test_scratch_is_private_to_each_run(run: Run) -> None:
    first = run("open('note.txt', 'w').write('run 1'); open('/tmp/t', 'w').write('x')", config=FAST)
    assert first.ok, first
    second = run("import os; print(os.listdir('.'), os.listdir('/tmp'))", config=FAST)
    assert second.ok, second
    assert "note.txt" not in second.stdout and "'t'" not in second.stdout
    assert "before" not in second.stdout  # harness path: the earlier program's /tmp file is gone


@requires_sandbox
def test_host_processes_are_invisible(run: Run) -> None:
    code = textwrap.dedent(
        f"""
        import os, signal
        print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), os.getpid())
        try:
            os.kill({os.getpid()}, signal.SIGTERM)
            print("SIGNALLED")
        except OSError as e:
            print("no such process", e.errno)
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    pids, kill = r.stdout.splitlines()
    *listed, own = pids.replace("[", "").replace("]", "").replace(",", "").split()
    if run is _direct:  # bwrap's reaper (pid 1) and the program: nothing of the host
        assert listed == ["1", "2"] and own == "2"
    else:  # bwrap's reaper, the harness (pid 2) and the program: nothing of the host
        assert listed == ["1", "2", own] and int(own) > 2
    assert kill == "no such process 3"  # ESRCH: the test runner's pid does not exist in there


@requires_sandbox
def test_cannot_create_user_namespaces(run: Run) -> None:
    code = textwrap.dedent(
        """
        import ctypes, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.unshare(0x10000000), ctypes.get_errno())  # CLONE_NEWUSER
        print(subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode)
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    rc, errno_, tool_rc = r.stdout.split()
    assert rc == "-1" and errno_ in ("1", "28")  # EPERM (seccomp) / ENOSPC (--disable-userns)
    assert tool_rc != "0"


# --------------------------------------------------------------------------------------------------
# Limits


@requires_sandbox
def test_fork_bomb_is_contained_by_the_process_limit(run: Run) -> None:
    bomb = "import os\nwhile True:\n    os.fork()\n"
    r = run(bomb, config=FAST)
    assert not r.ok
    assert r.killed_reason == "process_limit", r
    assert "Resource temporarily unavailable" in r.stderr
    assert r.duration_s < FAST.wall_seconds
    assert _leftover_sandbox_processes(FAST) == []


@requires_sandbox
def test_process_count_never_exceeds_the_limit(run: Run) -> None:
    code = textwrap.dedent(
        """
        import os, time
        kids = 0
        try:
            for _ in range(1000):
                if os.fork() == 0:
                    time.sleep(5)
                    os._exit(0)
                kids += 1
        except OSError as e:
            print("fork failed", e.errno)
        print(kids)
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    assert r.stdout.splitlines()[0] == "fork failed 11"
    assert int(r.stdout.splitlines()[1]) == FAST.max_processes - 1  # the interpreter is the 16th
    assert r.duration_s < 4  # the sleeping children die with the program (pid namespace torn down)
    assert _leftover_sandbox_processes(FAST) == []


@requires_sandbox
def test_concurrent_sandboxes_do_not_share_the_process_limit(run: Run) -> None:
    code = textwrap.dedent(
        """
        import os, time
        kids = 0
        try:
            for _ in range(100):
                if os.fork() == 0:
                    time.sleep(1.5)
                    os._exit(0)
                kids += 1
        except OSError:
            pass
        time.sleep(1)
        print(kids)
        """
    )
    config = dataclasses.replace(FAST, max_processes=6)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: run(code, config=config), range(3)))
    assert [r.stdout.strip() for r in results] == ["5", "5", "5"], results


@requires_sandbox
def test_memory_hog_is_stopped(run: Run) -> None:
    config = dataclasses.replace(FAST, memory_mb=256)
    r = run("x = bytearray(2 * 1024 ** 3)\nprint('allocated')", config=config)
    assert r.exit_code != 0 and "allocated" not in r.stdout
    assert r.killed_reason == "memory" and "MemoryError" in r.stderr
    gradual = run("x = []\nwhile True:\n    x.append(b' ' * 10 ** 6)", config=config)
    assert gradual.killed_reason == "memory", gradual
    assert gradual.duration_s < FAST.wall_seconds


@requires_sandbox
def test_infinite_loop_is_killed_by_the_cpu_limit(run: Run) -> None:
    config = dataclasses.replace(FAST, cpu_seconds=1, wall_seconds=10)
    r = run("while True:\n    pass", config=config)
    assert r.timed_out and r.killed_reason == "cpu_time", r
    assert r.exit_code == 128 + 24  # SIGXCPU
    assert r.duration_s < 5


@requires_sandbox
def test_sleeping_program_is_killed_by_the_wall_limit(run: Run) -> None:
    config = dataclasses.replace(FAST, wall_seconds=1.5)
    r = run("import time\nprint('started', flush=True)\ntime.sleep(60)", config=config)
    assert r.timed_out and r.killed_reason == "wall_time", r
    assert r.exit_code == -9
    assert r.stdout == "started\n"  # what was flushed before the kill is kept
    assert 1.4 < r.duration_s < 4
    assert _leftover_sandbox_processes(config) == []


@requires_sandbox
def test_huge_output_is_capped_and_the_program_killed(run: Run) -> None:
    r = run("while True:\n    print('y' * 1000)", config=FAST)
    assert r.killed_reason == "output_limit" and r.stdout_truncated, r.killed_reason
    assert len(r.stdout.encode()) == FAST.max_output_bytes
    assert r.duration_s < 5


@requires_sandbox
def test_output_cap_without_killing_keeps_the_head(run: Run) -> None:
    config = dataclasses.replace(FAST, kill_on_output_limit=False, max_output_bytes=1000)
    code = "import sys\nfor i in range(10000):\n    print(i)\nprint('done', file=sys.stderr)"
    r = run(code, config=config)
    assert r.ok, r
    assert r.stdout_truncated and not r.stderr_truncated
    assert len(r.stdout) == 1000 and r.stdout.startswith("0\n1\n2\n")
    assert r.stderr == "done\n"


@requires_sandbox
def test_file_size_limit(run: Run) -> None:
    r = run("open('big.bin', 'wb').write(b'x' * (3 * 1024 * 1024))", config=FAST)
    assert r.exit_code != 0
    assert r.killed_reason == "file_size", r


@requires_sandbox
def test_message_queues_and_keyrings_are_refused(run: Run) -> None:
    # Kernel objects that outlive their creator and that the harness cannot list: refused outright.
    code = textwrap.dedent(
        """
        import ctypes, platform
        libc = ctypes.CDLL(None, use_errno=True)
        nrs = {"x86_64": (240, 248, 250), "aarch64": (180, 217, 219)}[platform.machine()]
        calls = {"mq_open": (b"/q", 0o100, 0o600, None), "add_key": (b"user", b"k", b"v", 1, -4),
                 "keyctl": (0, -4, 0, 0, 0)}
        for (name, args), nr in zip(calls.items(), nrs):
            rc = libc.syscall(nr, *args)
            print(name, rc, ctypes.get_errno())
        """
    )
    r = run(code, config=FAST)
    assert r.ok, r
    assert r.stdout.splitlines() == ["mq_open -1 38", "add_key -1 38", "keyctl -1 38"]  # ENOSYS


# --------------------------------------------------------------------------------------------------
# The harness: many programs in one sandbox, each fresh


@requires_sandbox
def test_harness_leaves_nothing_for_the_next_program() -> None:
    config = dataclasses.replace(FAST, max_processes=8)
    messy = textwrap.dedent(
        """
        import ctypes, os, random, time
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.shmget(0, 4096, 0o1600) >= 0 and libc.semget(0, 1, 0o1600) >= 0
        assert libc.msgget(0, 0o1600) >= 0
        for path in ("/tmp/left.txt", "left-in-workspace.txt", "/dev/shm/left"):
            open(path, "w").write("x")
        os.makedirs("/tmp/a/b/c")
        open("/tmp/a/b/c/deep.txt", "w").write("x")
        os.chmod("/tmp/a/b", 0)
        os.environ["LEFT"] = "1"
        for _ in range(3):  # detached sleepers (double fork + new session): they must not survive
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(30)
                os._exit(0)
        time.sleep(0.2)
        print(random.getrandbits(64))
        """
    )
    probe = textwrap.dedent(
        """
        import os, random, time
        print(sorted(os.listdir("/tmp")), os.listdir("."), os.listdir("/dev/shm"))
        print(sum(len(open(f"/proc/sysvipc/{k}").read().splitlines()) - 1 for k in ("shm", "sem", "msg")))
        print(len([p for p in os.listdir("/proc") if p.isdigit()]), os.environ.get("LEFT"))
        kids = 0
        try:
            for _ in range(50):
                if os.fork() == 0:
                    time.sleep(2)
                    os._exit(0)
                kids += 1
        except OSError:
            pass
        print(kids)
        print(random.getrandbits(64))
        """
    )
    with ProgramRunner(config) as runner:
        first = runner.run(messy)
        second = runner.run(probe)
        third = runner.run(probe)
        assert runner.sandboxes_started == 1
    assert first.ok and second.ok and third.ok, (first, second, third)
    listing, ipc, procs, kids, rand = second.stdout.splitlines()
    assert listing == "['workspace'] ['main.py'] []"  # a fresh /tmp, workspace and /dev/shm
    assert ipc == "0"  # SysV shared memory, semaphores, message queues removed
    assert procs == "3 None"  # bwrap's reaper, the harness, the program: no sleeper survived
    assert kids == str(config.max_processes - 1)  # the full process budget: none counted from before
    assert first.stdout.strip() != rand != third.stdout.splitlines()[-1]  # random state is not shared
    assert third.stdout.splitlines()[:4] == second.stdout.splitlines()[:4]  # the forks are gone too


LIKE_MAIN_PY = [
    ("import sys\nprint(__name__, sys.argv, __file__, sys.path[0], repr(input()))", "a\r\nb\n"),
    ("def f():\n    raise ValueError('x')\n\nf()", ""),
    ("import sys\nsys.exit('message')", ""),
    ("raise SystemExit(3)", ""),
    ("exit(300)", ""),
    ("raise KeyboardInterrupt", ""),
    ("def f(:\n    pass", ""),
    ("import atexit\natexit.register(print, 'bye')\nprint('hi')", ""),
    ("import os\nprint('never flushed')\nos._exit(4)", ""),
    ("import sys\nprint('\u00e9', file=sys.stderr)\nprint('\\udcff')", ""),
    (
        "import threading, time\ndef w():\n    time.sleep(0.2)\n    print('thread done')\n"
        "threading.Thread(target=w).start()\nprint('main done')",
        "",
    ),
    (
        "import multiprocessing as mp\ndef sq(x):\n    return x * x\nif __name__ == '__main__':\n"
        "    with mp.Pool(2) as p:\n        print(p.map(sq, [1, 2, 3]))",
        "",
    ),
    (
        '"""doc"""\nimport sys\nprint(__doc__, type(__builtins__).__name__, sys.stdin.encoding, '
        "sys.stdout.errors, sys.stderr.errors, sys.stderr.line_buffering, sys.stdin.name)",
        "",
    ),
]


@requires_sandbox
def test_harness_runs_programs_like_python_main_py() -> None:
    config = dataclasses.replace(FAST, wall_seconds=20)
    with ProgramRunner(config) as runner:
        harnessed = [runner.run(code, stdin) for code, stdin in LIKE_MAIN_PY]
    for (code, stdin), got in zip(LIKE_MAIN_PY, harnessed, strict=True):
        want = run_python(code, stdin=stdin, config=config)
        assert (got.exit_code, got.stdout, got.stderr) == (want.exit_code, want.stdout, want.stderr), code
        assert got.killed_reason == want.killed_reason, code


@requires_sandbox
def test_a_program_that_kills_the_harness_fails_alone() -> None:
    with ProgramRunner(FAST) as runner:
        before = runner.run("print(1)")
        killer = runner.run("import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(5)")
        after = runner.run("print(2)")
        assert runner.sandboxes_started == 2
    assert before.stdout == "1\n" and after.stdout == "2\n" and after.ok
    assert not killer.ok and killer.killed_reason == "signal"
    assert "harness exited" in killer.stderr
    assert _leftover_sandbox_processes(FAST) == []


@requires_sandbox
def test_a_program_that_stops_the_harness_times_out_alone() -> None:
    config = dataclasses.replace(FAST, wall_seconds=1)
    with ProgramRunner(config) as runner:
        stopper = runner.run("import os, signal, time\nos.kill(os.getppid(), signal.SIGSTOP)\ntime.sleep(30)")
        after = runner.run("print(2)")
        assert runner.sandboxes_started == 2
    assert stopper.timed_out and stopper.killed_reason == "wall_time" and stopper.exit_code == -9
    assert "did not answer in time" in stopper.stderr
    assert stopper.duration_s < 10
    assert after.ok and after.stdout == "2\n"
    assert _leftover_sandbox_processes(config) == []


@requires_sandbox
def test_a_scratch_area_the_harness_cannot_clean_retires_the_sandbox() -> None:
    deep = "import os\nos.makedirs('/tmp/' + '/'.join(['d'] * 100))\nprint('made')"
    with ProgramRunner(FAST) as runner:
        made = runner.run(deep)
        after = runner.run("import os\nprint(os.listdir('/tmp'))")
        assert runner.sandboxes_started == 2  # the first sandbox was not handed another program
    assert made.ok and made.stdout == "made\n"  # the program's own result stands
    assert after.ok and after.stdout == "['workspace']\n"


@requires_sandbox
def test_harness_protocol_pipes_and_memory_are_out_of_reach() -> None:
    code = textwrap.dedent(
        """
        import os
        parent = os.getppid()
        for path in (f"/proc/{parent}/fd", f"/proc/{parent}/mem", f"/proc/{parent}/environ"):
            try:
                print("OPENED", path, os.listdir(path) if path.endswith("fd") else open(path, "rb").read(1))
            except OSError as e:
                print("denied", e.errno)
        print(sorted(os.listdir("/proc/self/fd")))
        """
    )
    with ProgramRunner(FAST) as runner:
        r = runner.run(code)
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert lines[:3] == ["denied 13"] * 3, lines  # EACCES: the harness is not dumpable
    assert lines[3] == "['0', '1', '2', '3']"  # its own stdio (+ the listing's fd): nothing inherited


@requires_sandbox
def test_pool_hands_out_each_warm_sandbox_once() -> None:
    with SandboxPool(FAST, size=2) as pool:
        assert pool.wait_ready(), pool.last_error
        first = pool.take()
        assert first.run("open('/tmp/mine', 'w').write('x'); print('ok')").stdout == "ok\n"
        pool.discard(first)
        second = pool.take()
        assert second is not first and not first.alive
        seen = second.run("import os; print(os.listdir('/tmp'))")
        pool.discard(second)
        assert seen.stdout == "['workspace']\n"
        assert pool.hits == 2 and pool.misses == 0
        assert pool.wait_ready(), "the pool starts replacements for the sandboxes handed out"
    assert _leftover_sandbox_processes(FAST) == []


@requires_sandbox
def test_pool_reuses_a_sandbox_clean_and_only_as_often_as_told() -> None:
    leftover = (
        "import os, subprocess\nopen('/tmp/mine', 'w').write('x'); open('/dev/shm/mine', 'w').write('x')\n"
        "subprocess.Popen(['sleep', '30'], start_new_session=True)\nprint(os.getpid())"
    )
    probe = (
        "import json, os\nprint(json.dumps([sorted(os.listdir('/tmp')), os.listdir('/dev/shm'), "
        "[p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (os.getpid(), os.getppid())]]))"
    )
    with SandboxPool(FAST, size=1, programs_per_sandbox=3) as pool:
        assert pool.wait_ready(), pool.last_error
        first = pool.take()
        assert first.run(leftover).ok
        pool.give_back(first)
        second = pool.take()
        assert second is first and pool.reuses == 1  # back in the pool, not closed
        seen = second.run(probe)
        assert seen.ok, seen
        tmp, shm, others = json.loads(seen.stdout)
        assert (tmp, shm) == (["workspace"], []), seen.stdout  # nothing left in /tmp or /dev/shm
        assert all(int(p) <= 2 for p in others), seen.stdout  # the sleeper is gone (pid 1: bwrap's init)
        assert second.run("print('third')").stdout == "third\n"
        pool.give_back(second)  # its third program: retired, not reused
        assert not second.alive
        third = pool.take()
        assert third is not second and third.programs == 0
        pool.give_back(third)
    assert _leftover_sandbox_processes(FAST) == []


@requires_sandbox
def test_pool_never_reuses_a_sandbox_started_in_the_callers_thread() -> None:
    with SandboxPool(FAST, size=0, programs_per_sandbox=8) as pool:  # no warm ones: every call a miss
        cold = pool.take()
        assert cold.run("print(1)").ok
        pool.give_back(cold)  # --die-with-parent follows the caller's thread: never handed to another
        assert not cold.alive and pool.misses == 1 and pool.reuses == 0
        assert pool.run("print(2)").stdout == "2\n" and pool.misses == 2
    with pytest.raises(ValueError, match="programs_per_sandbox"):
        SandboxPool(FAST, size=0, programs_per_sandbox=0)


def test_harness_refuses_to_run_outside_a_sandbox(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.write_text("x")
    harness = REPO / "coa" / "tools" / "sandbox_harness.py"
    proc = subprocess.run(
        [sys.executable, str(harness), "{}"], input=b"", capture_output=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 2 and b"refusing to run outside" in proc.stderr
    assert canary.exists()  # it emptied no /tmp and killed nothing


# --------------------------------------------------------------------------------------------------
# Refusing without a sandbox


def test_refuses_when_bwrap_is_missing(tmp_path: Path) -> None:
    marker = tmp_path / "ran-unconfined"
    config = dataclasses.replace(FAST, bwrap=str(tmp_path / "no-such-bwrap"))
    ok, message = sandbox_available(config)
    assert not ok
    assert "bubblewrap" in message and "apt-get install -y bubblewrap" in message
    with pytest.raises(SandboxUnavailable, match=r"apt-get install -y bubblewrap"):
        run_python(f"open({str(marker)!r}, 'w').write('x')", config=config)
    program = f"open({str(marker)!r}, 'w').write('x')"
    with pytest.raises(SandboxUnavailable):
        code_tool(f"```python\n{program}\n```", config=config)
    with pytest.raises(SandboxUnavailable):
        run_tests(program, ["assert True"], config)
    with pytest.raises(SandboxUnavailable):
        run_tests_batch([(program, ["assert True"])], config)
    with pytest.raises(SandboxUnavailable):
        HarnessSandbox(config)
    with SandboxPool(config, size=1) as pool, pytest.raises(SandboxUnavailable):
        code_tool(f"```python\n{program}\n```", pool=pool)
    assert not marker.exists()  # never run without the sandbox


def test_refuses_when_bwrap_fails_its_self_test(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\ncase \"$1\" in --version) echo 'bubblewrap 0.8.0';; --help) "
        "printf '    --perms\\n    --size\\n    --die-with-parent\\n    --ro-bind-data\\n';; "
        "*) echo 'bwrap: No permissions to create new namespace' >&2; exit 1;; esac\n"
    )
    fake.chmod(0o755)
    config = dataclasses.replace(FAST, bwrap=str(fake))
    ok, message = sandbox_available(config)
    assert not ok
    assert "self-test failed" in message and "No permissions to create new namespace" in message
    assert "user namespaces" in message
    with pytest.raises(SandboxUnavailable, match="refusing to run code without a sandbox"):
        run_python("print(1)", config=config)
    with pytest.raises(SandboxUnavailable, match="refusing to run code without a sandbox"):
        run_tests("print(1)", ["assert True"], config)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="wall_seconds"):
        SandboxConfig(wall_seconds=0)
    with pytest.raises(ValueError, match="uid_range"):
        SandboxConfig(uid_range=(5, 5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        FAST.cpu_seconds = 100  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# The unprivileged (user-namespace) mode, exercised by switching to `nobody` with the system Python


_SYSTEM_PYTHON = "/usr/bin/python3"


@requires_sandbox
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to start the check as the unprivileged user)")
@pytest.mark.skipif(
    not os.access(_SYSTEM_PYTHON, os.X_OK), reason=f"needs a system Python at {_SYSTEM_PYTHON}"
)
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_userns_mode_for_unprivileged_callers() -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from coa.tools.sandbox import SandboxConfig, run_python, sandbox_available
        ok, message = sandbox_available()
        print(ok, "mode userns" in message)
        config = SandboxConfig(max_processes=6, wall_seconds=8)
        code = "import os, time\\nk = 0\\ntry:\\n    for _ in range(50):\\n        if os.fork() == 0:\\n"
        code += "            time.sleep(2)\\n            os._exit(0)\\n        k += 1\\nexcept OSError:\\n"
        code += "    pass\\nprint(k, os.listdir('/'))"
        r = run_python(code, config=config)
        print(r.exit_code, r.stdout.strip())
        from coa.tools.harness_pool import ProgramRunner, SandboxPool
        probe = "import os\\nprint(os.listdir('/tmp'), len([p for p in os.listdir('/proc') if p.isdigit()]))"
        with ProgramRunner(config) as runner:
            for program in (code, probe, "import os\\nos.kill(os.getppid(), 9)", probe):
                r = runner.run(program)
                print(r.exit_code, r.stdout.strip())
            print(runner.sandboxes_started)
        with SandboxPool(config, size=1) as pool:
            pool.wait_ready()
            r = pool.run(code)
            print(r.exit_code, r.stdout.strip(), pool.hits)
        """
    )
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", _SYSTEM_PYTHON, "-I", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    if "No module named" in proc.stderr or "Permission denied" in proc.stderr:
        pytest.skip(f"needs the checkout readable by nobody: {proc.stderr[-200:]}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "True True", proc.stdout
    assert lines[1].startswith("0 5 "), lines[1]
    assert "'root'" not in lines[1] and "'work'" not in lines[1]
    # The harness path in userns mode: same process budget, a clean sandbox after each program, and
    # a program that kills the harness fails alone.
    assert lines[2].startswith("0 5 ") and "'work'" not in lines[2], lines  # (+ /opt: the harness)
    assert lines[3] == "0 ['workspace'] 3", lines  # bwrap's reaper, the harness, the program
    assert lines[4].startswith("137") or lines[4].startswith("-9"), lines
    assert lines[5] == "0 ['workspace'] 3" and lines[6] == "2", lines
    assert lines[7] == lines[2] + " 1", lines  # the pooled call ran in a warm sandbox


@requires_sandbox
def test_harness_without_pidfd_polls_for_the_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Kernels before 5.3 have no pidfd: the harness then polls waitpid; same results.
    source = harness_host._harness_source()
    patched = source.replace(b"return os.pidfd_open(pid)", b"return -1")
    assert patched != source
    monkeypatch.setattr(harness_host, "_harness_source", lambda: patched)
    config = dataclasses.replace(FAST, wall_seconds=1.5)
    with ProgramRunner(config) as runner:
        echo = runner.run("print(input()[::-1])", "olleh\n")
        slow = runner.run("import time\ntime.sleep(30)")
        bomb = runner.run("import os\nwhile True:\n    os.fork()")
    assert echo.ok and echo.stdout == "hello\n"
    assert slow.killed_reason == "wall_time" and 1.4 < slow.duration_s < 4
    assert bomb.killed_reason == "process_limit"


@requires_sandbox
def test_a_harness_that_never_starts_is_unavailable_not_a_failing_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(harness_host, "_harness_source", lambda: b"raise SystemExit('broken harness')\n")
    monkeypatch.setattr(harness_host, "_started", set())
    with pytest.raises(SandboxUnavailable, match="broken harness"):
        run_tests("print(1)", [IOTest("", "1")], FAST)
