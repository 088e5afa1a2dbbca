"""A full disk (a 5 MB tmpfs as the storage root, when root may mount one; else writes that raise
ENOSPC) and two identical commands at once on one store."""

from __future__ import annotations

import contextlib
import errno
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from coa import io
from tests.faults.conftest import record
from tests.faults.harness import (
    CONFIG,
    REPO,
    TASKS,
    cli,
    command,
    exactly_the_manifest,
    in_repo,
    subprocess_env,
)


@contextlib.contextmanager
def small_disk(path: Path, size: str = "5m") -> Iterator[bool]:
    """A tmpfs of ``size`` at ``path`` (True), or nothing when mounting is not allowed (False)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True).returncode == 0  # fmt: skip
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(root: Path, leave: int) -> Path:
    """Fill the disk under ``root`` but ``leave`` bytes."""
    import os

    filler = root / "filler.bin"
    stat = os.statvfs(root)
    free = stat.f_bavail * stat.f_frsize
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


def _collect_args(tasks: str) -> list[str]:
    return ["collect", "--tasks", tasks, "--table", "train", "-c", CONFIG, "collect.concurrency=2"]


@pytest.mark.parametrize("leave_kb", [48])
def test_a_full_disk_fails_in_one_line_commits_nothing_and_the_rerun_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, leave_kb: int
) -> None:
    with small_disk(tmp_path / "disk") as mounted, in_repo():
        root = tmp_path / "disk" / "store"
        code, out, err = cli(root, "tasks", "synthetic", "-c", CONFIG, *TASKS)
        assert code == 0, err
        tasks = out.strip().splitlines()[-1]
        if mounted:
            filler = _fill(tmp_path / "disk", leave_kb * 1024)
        else:  # no mount allowed: every Parquet write past the first few raises ENOSPC
            import pyarrow.parquet as pq

            real, calls = pq.write_table, [0]

            def full(*args: object, **kwargs: object) -> None:
                calls[0] += 1
                if calls[0] > leave_kb // 16:
                    raise OSError(errno.ENOSPC, "No space left on device")
                real(*args, **kwargs)  # type: ignore[arg-type]

            monkeypatch.setattr(pq, "write_table", full)
        code, out, err = cli(root, *_collect_args(tasks))
        lines = [line for line in err.strip().splitlines() if line.strip().startswith("error:")]
        committed = (
            list((root / "trajectories").glob("*/_COMMITTED")) if (root / "trajectories").exists() else []
        )
        held = code == 3 and len(lines) == 1 and "no space left" in lines[0] and not committed
        if mounted:
            filler.unlink()
        else:
            monkeypatch.undo()
        code_after, out_after, err_after = cli(root, *_collect_args(tasks))
        uri = out_after.split("trajectories: ", 1)[1].split()[0] if code_after == 0 else ""
        rows = io.read_table(uri).select(["run_id", "status"]).to_pylist() if uri else []
        exact = bool(uri) and exactly_the_manifest(Path(uri))
    ids = [r["run_id"] for r in rows]
    survived = held and code_after == 0 and len(ids) == 16 == len(set(ids)) and exact
    record("collect", "full disk" + (" (tmpfs)" if mounted else " (ENOSPC raised)"), survived)
    assert code == 3 and len(lines) == 1 and "no space left" in lines[0], err[-2000:]
    assert "Traceback" not in err and not committed
    assert code_after == 0 and len(ids) == 16 == len(set(ids)), err_after[-2000:]
    assert exact


def _start(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command(*args), cwd=REPO, env=subprocess_env(root), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


@pytest.mark.parametrize("stage", ["collect", "curate"])
def test_two_identical_commands_at_once_give_one_artifact(tmp_path: Path, stage: str) -> None:
    root = tmp_path / "store"
    with in_repo():
        code, out, err = cli(root, "tasks", "synthetic", "-c", CONFIG, *TASKS)
        assert code == 0, err
        tasks = out.strip().splitlines()[-1]
        args = _collect_args(tasks)
        if stage == "curate":  # the gate on: great-expectations Data Docs go through staging too
            code, out, err = cli(root, *args)
            assert code == 0, err
            raw = out.split("trajectories: ", 1)[1].split()[0]
            args = ["curate", "--raw", raw, "--tasks", tasks, "--table", "train", "-c", CONFIG,
                    "curate.gate.correctness_floor=0.0"]  # fmt: skip
        procs = [_start(root, *args), _start(root, *args)]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    kind = "trajectories" if stage == "collect" else "curated"
    folders = [p for p in (root / kind).iterdir() if p.is_dir()]
    verbs = sorted("reused" if "reused committed artifact" in e else "built" for _, _, e in results)
    failures = list(root.glob("failures/*/*.json"))
    staging = (
        list((root / io.STAGING_DIR / kind).iterdir()) if (root / io.STAGING_DIR / kind).exists() else []
    )
    checks = {
        "both exit 0": all(code == 0 for code, _, _ in results),
        "one built, one reused": verbs == ["built", "reused"],
        "one artifact": len(folders) == 1,
        "folder holds exactly its manifest": len(folders) == 1 and exactly_the_manifest(folders[0]),
        "no failure marker, no staging left": not failures and not staging,
    }
    record(stage, "two identical commands at once", all(checks.values()))
    assert all(checks.values()), (checks, [e[-1500:] for _, _, e in results])
    manifest = json.loads((folders[0] / io.MANIFEST).read_text())
    if stage == "curate":
        assert any(f.startswith("data_docs/") for f in manifest["files"])


def test_a_failed_build_leaves_its_marker_before_an_identical_run_gets_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that fails writes its failure marker while it still holds the key's lock (a slow
    disk makes the marker take 0.5 s): an identical run waiting on that lock sees, the moment it gets
    it, the failure and no artifact, never "no failure and no artifact"."""
    import fcntl
    import threading
    import time

    from coa.attempts import failure_marker
    from coa.steps import Build, Stage, Step, run_step

    store = io.Store(str(tmp_path / "store"))
    building = threading.Event()

    def build(b: Build) -> None:
        b.writer.write_file("partial.txt", "half")
        building.set()
        raise RuntimeError("the teacher endpoint went away")

    step = Step(name="flaky", stage=Stage("flaky", "tasks", build), artifact="unit", config={"n": 1})
    write_atomic = io.write_atomic

    def slow_write(fs: object, path: str, data: bytes) -> None:
        time.sleep(0.5)
        write_atomic(fs, path, data)  # type: ignore[arg-type]

    monkeypatch.setattr(io, "write_atomic", slow_write)
    errors: list[BaseException] = []

    def first_run() -> None:
        try:
            run_step(step, store)
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=first_run)
    thread.start()
    assert building.wait(60), "the build never started"
    (lock,) = (tmp_path / "store" / io.LOCKS_DIR / "tasks").glob("*.lock")
    with open(lock, "a+b") as fh:  # an identical run: waits for the lock, then looks
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        artifact = tmp_path / "store" / "tasks" / lock.name.removesuffix(".lock")
        marker = Path(failure_marker(str(artifact)))
        seen = {"failure marker": marker.exists(), "no artifact": not (artifact / io.MANIFEST).exists()}
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    thread.join(60)
    held = all(seen.values()) and bool(errors)
    record("runner", "a failed build seen by an identical run", held)
    assert held, (seen, errors)
    assert json.loads(marker.read_text())["message"] == "the teacher endpoint went away"
