"""The bubblewrap sandbox: confinement (network, files, processes) and limits actually hold."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coa.tools import sandbox
from coa.tools.code import code_tool
from coa.tools.sandbox import SandboxConfig, SandboxUnavailable, run_python, sandbox_available
from tests.tools.support import FAST, requires_sandbox

REPO = Path(__file__).resolve().parents[2]


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
def test_normal_program_prints() -> None:
    r = run_python("print('hello', 6 * 7)", config=FAST)
    assert r.ok, r
    assert r.exit_code == 0
    assert r.stdout == "hello 42\n"
    assert r.stderr == ""
    assert not r.timed_out and r.killed_reason is None and not r.truncated
    assert 0 < r.duration_s < FAST.wall_seconds


@requires_sandbox
def test_stdin_is_fed_to_the_program() -> None:
    code = "import sys\nn = int(input())\nprint(sum(int(x) for x in sys.stdin.read().split()[:n]))"
    r = run_python(code, stdin="3\n10 20 30 40\n", config=FAST)
    assert r.ok, r
    assert r.stdout.strip() == "60"


@requires_sandbox
def test_large_stdin_round_trips() -> None:
    data = "x" * 1_000_000 + "\n"
    r = run_python("import sys; d = sys.stdin.read(); print(len(d), d[:3])", stdin=data, config=FAST)
    assert r.ok, r
    assert r.stdout.split() == ["1000001", "xxx"]


@requires_sandbox
def test_input_without_stdin_sees_eof_instead_of_hanging() -> None:
    r = run_python("input('number? ')", config=FAST)
    assert r.exit_code == 1
    assert "EOFError" in r.stderr
    assert not r.timed_out


@requires_sandbox
def test_exit_status_and_streams_are_separate() -> None:
    r = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)", config=FAST)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.ok and r.killed_reason is None


@requires_sandbox
def test_runs_as_unprivileged_user_with_clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COA_SANDBOX_SECRET", "hunter2")
    code = "import os\nprint(os.getuid(), os.geteuid())\nprint(os.environ.get('COA_SANDBOX_SECRET'))"
    r = run_python(code, config=FAST)
    assert r.ok, r
    uid, euid = map(int, r.stdout.splitlines()[0].split())
    assert uid != 0 and euid != 0
    assert r.stdout.splitlines()[1] == "None"


@requires_sandbox
def test_interpreter_site_packages_are_usable() -> None:
    pytest.importorskip("numpy")
    r = run_python(
        "import numpy as np\nprint(int(np.arange(10).sum()))", config=SandboxConfig(wall_seconds=60)
    )
    assert r.ok, r
    assert r.stdout.strip() == "45"


@requires_sandbox
def test_multiprocessing_works_inside() -> None:
    code = textwrap.dedent(
        """
        import multiprocessing as mp
        if __name__ == "__main__":
            with mp.Pool(2) as pool:
                print(pool.map(abs, [-1, -2, 3]))
        """
    )
    r = run_python(code, config=dataclasses.replace(FAST, wall_seconds=20))
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
def test_cannot_reach_a_server_on_the_host_loopback(host_server: tuple[int, list[str]]) -> None:
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
    r = run_python(code, config=FAST)
    assert r.ok, r
    assert r.stdout.startswith("blocked"), r.stdout
    assert len(accepted) == 1  # only the host's own control connection got through


@requires_sandbox
def test_no_external_network_and_no_dns() -> None:
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
    r = run_python(code, config=FAST)
    assert r.ok, r
    lines = r.stdout.splitlines()
    assert lines[0] == "[(1, 'lo')]"  # only the sandbox's own loopback
    assert all(line.startswith("blocked") for line in lines[1:3]), lines
    assert lines[3] == "no dns"


@requires_sandbox
def test_writing_outside_the_scratch_dir_fails(tmp_path: Path) -> None:
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
    r = run_python(code, config=FAST)
    assert r.ok, r
    assert "WROTE" not in r.stdout, r.stdout
    assert r.stdout.count("denied") == len(targets)
    assert r.stdout.count("scratch") == 3
    assert r.stdout.splitlines()[-1] == sandbox.SANDBOX_WORKDIR
    assert not host_target.exists()
    assert not (REPO / "escaped.txt").exists()


@requires_sandbox
def test_host_home_and_project_tree_are_invisible() -> None:
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
    r = run_python(code, config=FAST)
    assert r.ok, r
    assert "LISTED" not in r.stdout and "READ" not in r.stdout, r.stdout
    assert r.stdout.count("hidden") == len(secret_paths)
    top = r.stdout.splitlines()[-1]
    assert "'root'" not in top and "'home'" not in top and "'work'" not in top


@requires_sandbox
def test_scratch_is_private_to_each_run() -> None:
    first = run_python("open('note.txt', 'w').write('run 1'); open('/tmp/t', 'w').write('x')", config=FAST)
    assert first.ok, first
    second = run_python("import os; print(os.listdir('.'), os.listdir('/tmp'))", config=FAST)
    assert second.ok, second
    assert "note.txt" not in second.stdout and "'t'" not in second.stdout


@requires_sandbox
def test_host_processes_are_invisible() -> None:
    code = textwrap.dedent(
        f"""
        import os, signal
        print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
        try:
            os.kill({os.getpid()}, signal.SIGTERM)
            print("SIGNALLED")
        except OSError as e:
            print("no such process", e.errno)
        """
    )
    r = run_python(code, config=FAST)
    assert r.ok, r
    pids, kill = r.stdout.splitlines()
    assert pids == "[1, 2]"  # bwrap's reaper (pid 1) and the program: nothing of the host
    assert kill == "no such process 3"  # ESRCH: the test runner's pid does not exist in there


@requires_sandbox
def test_cannot_create_user_namespaces() -> None:
    code = textwrap.dedent(
        """
        import ctypes, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.unshare(0x10000000), ctypes.get_errno())  # CLONE_NEWUSER
        print(subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode)
        """
    )
    r = run_python(code, config=FAST)
    assert r.ok, r
    rc, errno_, tool_rc = r.stdout.split()
    assert rc == "-1" and errno_ in ("1", "28")  # EPERM (seccomp) / ENOSPC (--disable-userns)
    assert tool_rc != "0"


# --------------------------------------------------------------------------------------------------
# Limits


@requires_sandbox
def test_fork_bomb_is_contained_by_the_process_limit() -> None:
    bomb = "import os\nwhile True:\n    os.fork()\n"
    r = run_python(bomb, config=FAST)
    assert not r.ok
    assert r.killed_reason == "process_limit", r
    assert "Resource temporarily unavailable" in r.stderr
    assert r.duration_s < FAST.wall_seconds
    assert _leftover_sandbox_processes(FAST) == []


@requires_sandbox
def test_process_count_never_exceeds_the_limit() -> None:
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
    r = run_python(code, config=FAST)
    assert r.ok, r
    assert r.stdout.splitlines()[0] == "fork failed 11"
    assert int(r.stdout.splitlines()[1]) == FAST.max_processes - 1  # the interpreter is the 16th
    assert r.duration_s < 4  # the sleeping children die with the program (pid namespace torn down)
    assert _leftover_sandbox_processes(FAST) == []


@requires_sandbox
def test_concurrent_sandboxes_do_not_share_the_process_limit() -> None:
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
        results = list(pool.map(lambda _: run_python(code, config=config), range(3)))
    assert [r.stdout.strip() for r in results] == ["5", "5", "5"], results


@requires_sandbox
def test_memory_hog_is_stopped() -> None:
    config = dataclasses.replace(FAST, memory_mb=256)
    r = run_python("x = bytearray(2 * 1024 ** 3)\nprint('allocated')", config=config)
    assert r.exit_code != 0 and "allocated" not in r.stdout
    assert r.killed_reason == "memory" and "MemoryError" in r.stderr
    gradual = run_python("x = []\nwhile True:\n    x.append(b' ' * 10 ** 6)", config=config)
    assert gradual.killed_reason == "memory", gradual
    assert gradual.duration_s < FAST.wall_seconds


@requires_sandbox
def test_infinite_loop_is_killed_by_the_cpu_limit() -> None:
    config = dataclasses.replace(FAST, cpu_seconds=1, wall_seconds=10)
    r = run_python("while True:\n    pass", config=config)
    assert r.timed_out and r.killed_reason == "cpu_time", r
    assert r.exit_code == 128 + 24  # SIGXCPU
    assert r.duration_s < 5


@requires_sandbox
def test_sleeping_program_is_killed_by_the_wall_limit() -> None:
    config = dataclasses.replace(FAST, wall_seconds=1.5)
    r = run_python("import time\nprint('started', flush=True)\ntime.sleep(60)", config=config)
    assert r.timed_out and r.killed_reason == "wall_time", r
    assert r.exit_code == -9
    assert r.stdout == "started\n"  # what was flushed before the kill is kept
    assert 1.4 < r.duration_s < 4
    assert _leftover_sandbox_processes(config) == []


@requires_sandbox
def test_huge_output_is_capped_and_the_program_killed() -> None:
    r = run_python("while True:\n    print('y' * 1000)", config=FAST)
    assert r.killed_reason == "output_limit" and r.stdout_truncated, r.killed_reason
    assert len(r.stdout.encode()) == FAST.max_output_bytes
    assert r.duration_s < 5


@requires_sandbox
def test_output_cap_without_killing_keeps_the_head() -> None:
    config = dataclasses.replace(FAST, kill_on_output_limit=False, max_output_bytes=1000)
    code = "import sys\nfor i in range(10000):\n    print(i)\nprint('done', file=sys.stderr)"
    r = run_python(code, config=config)
    assert r.ok, r
    assert r.stdout_truncated and not r.stderr_truncated
    assert len(r.stdout) == 1000 and r.stdout.startswith("0\n1\n2\n")
    assert r.stderr == "done\n"


@requires_sandbox
def test_file_size_limit() -> None:
    r = run_python("open('big.bin', 'wb').write(b'x' * (3 * 1024 * 1024))", config=FAST)
    assert r.exit_code != 0
    assert r.killed_reason == "file_size", r


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
    with pytest.raises(SandboxUnavailable):
        code_tool(f"```python\nopen({str(marker)!r}, 'w').write('x')\n```", config=config)
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
