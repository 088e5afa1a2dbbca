"""Running stages for the fault tier: a tiny chain of references, subprocesses killed at seeded
moments, and the checks that an artifact is exactly what its reference is."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from typer.testing import CliRunner

from coa import io
from coa.cli import app

REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "demo.yaml")
runner = CliRunner()

TASKS = ("synthetic.train={arithmetic: 8, multihop: 4, programming: 4}",
         "synthetic.heldout={arithmetic: 2, multihop: 1, programming: 1}")  # fmt: skip


@dataclasses.dataclass
class Stage:
    """One stage's command line, where its output lands, and its uninterrupted reference run."""

    name: str
    kind: str
    args: list[str]
    prints: str  # the line prefix its artifact URI follows ("" = the last line of stdout)
    uri: str = ""
    seconds: float = 0.0

    @property
    def folder(self) -> str:
        return Path(self.uri).name


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    """The CLI in this process (no import cost): exit code, stdout, stderr."""
    result = runner.invoke(app, ["--help"] if not args else list(args), env={"COA_STORAGE_ROOT": str(root)})
    return result.exit_code, result.stdout, result.stderr


def uri_of(stage: Stage, stdout: str) -> str:
    if not stage.prints:
        return stdout.strip().splitlines()[-1]
    return stdout.split(stage.prints, 1)[1].split()[0]


def run_reference(root: Path, stage: Stage) -> None:
    """Run the stage uninterrupted; ``stage.seconds`` is how long it held its address's lock (the
    build and commit, lazy imports included: the window a kill must land in)."""
    held: dict[str, float] = {}
    acquire, release = io.ArtifactWriter._acquire, io.ArtifactWriter._release

    def timed_acquire(self: io.ArtifactWriter) -> None:
        acquire(self)
        held.setdefault(self.uri, time.perf_counter())

    def timed_release(self: io.ArtifactWriter) -> None:
        if self._lock is not None and self.uri in held:
            held[self.uri] = time.perf_counter() - held[self.uri]
        release(self)

    io.ArtifactWriter._acquire, io.ArtifactWriter._release = timed_acquire, timed_release  # type: ignore[method-assign]
    try:
        code, out, err = cli(root, *stage.args)
    finally:
        io.ArtifactWriter._acquire, io.ArtifactWriter._release = acquire, release  # type: ignore[method-assign]
    assert code == 0, err[-3000:]
    stage.uri = uri_of(stage, out)
    stage.seconds = held[stage.uri.rstrip("/")]


def subprocess_env(root: Path) -> dict[str, str]:
    return {**os.environ, "COA_STORAGE_ROOT": str(root), "PYTHONPATH": str(REPO)}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "coa.cli", *args]


def lock_file(root: Path, stage: Stage) -> Path:
    return root / io.LOCKS_DIR / stage.kind / f"{stage.folder}.lock"


def _held(path: Path) -> bool:
    """Whether another process holds the address's lock (it has started building)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        return False


def kill_during(root: Path, stage: Stage, delay: float, timeout: float = 120.0) -> bool:
    """Start the stage in a subprocess, SIGKILL it ``delay`` seconds into its build (counted from the
    moment it holds the address's lock); False when it finished before the moment came."""
    proc = subprocess.Popen(
        command(*stage.args), cwd=REPO, env=subprocess_env(root),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    try:
        while not _held(lock_file(root, stage)):
            if proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        time.sleep(delay)
        if proc.poll() is not None:
            return False
        proc.kill()  # SIGKILL: no finally, no atexit, no flush
        proc.wait(timeout=30)
        return True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


KILLS = 3
"""SIGKILLs per stage at seeded moments (:func:`kill_at_seeded_moments`)."""


def kill_at_seeded_moments(root: Path, stage: Stage, seed: str) -> tuple[int, Path]:
    """SIGKILL the stage :data:`KILLS` times at seeded moments over the first half of the reference's
    build window (a resumed run has less left to do), one per sixth, then run it to the end; the
    kills that landed inside the build and the artifact the last run committed."""
    rng = random.Random(seed)
    injected = 0
    with in_repo():
        for k in range(KILLS):
            delay = stage.seconds * (k + rng.random()) / (2 * KILLS)
            injected += kill_during(root, stage, delay)
        code, out, err = cli(root, *stage.args)
    assert code == 0, err[-3000:]
    return injected, Path(uri_of(stage, out))


def kill_after_first_checkpoint(
    root: Path, args: Sequence[str], pattern: str, seed: str, timeout: float
) -> Path:
    """Start a training command in a subprocess and SIGKILL it at a seeded moment (< 0.2 s) after its
    first checkpoint (``pattern``: the glob of its ``trainer_state.json`` under ``root``); the path of
    that checkpoint's state. Fails when the run ended before a checkpoint could be killed."""
    proc = subprocess.Popen(command(*args), cwd=REPO, env=subprocess_env(root),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + timeout
    states: list[Path] = []
    try:
        while not states:
            states = list(root.glob(pattern))
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        time.sleep(random.Random(seed).random() * 0.2)  # a seeded moment right after the checkpoint
        injected = proc.poll() is None
    finally:
        proc.kill()  # SIGKILL: no finally, no atexit, no flush
        proc.wait(timeout=30)
    assert injected and states, f"the {args[0]} run ended before a checkpoint could be killed"
    return states[0]


def move_aside(uri: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(uri, dest)
    return dest


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def table_digests(folder: Path) -> dict[str, str]:
    manifest = json.loads((folder / io.MANIFEST).read_text())
    return {rel: sha(folder / rel) for info in manifest["tables"].values() for rel in info["files"]}


def exactly_the_manifest(folder: Path) -> bool:
    """A committed folder holds exactly the files its manifest lists (plus lineage and manifest)."""
    manifest = json.loads((folder / io.MANIFEST).read_text())
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    return present == {*manifest["files"], io.LINEAGE, io.MANIFEST}


def leftovers(root: Path, stage: Stage) -> list[str]:
    """Anything a killed run left that a reader could trip on: staging folders of this address, a
    failure marker, checkpoints (all removed by the successful rerun)."""
    found = []
    staging = root / io.STAGING_DIR / stage.kind
    if staging.is_dir():
        found += [p.name for p in staging.iterdir() if p.name.startswith(f"{stage.folder}-")]
    marker = root / "failures" / stage.kind / f"{stage.folder}.json"
    if marker.exists():
        found.append(str(marker))
    checkpoints = root / "checkpoints" / stage.kind / stage.folder
    if checkpoints.exists():
        found.append(str(checkpoints))
    return found


@contextlib.contextmanager
def in_repo():
    before = os.getcwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(before)
