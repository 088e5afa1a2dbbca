"""Benchmark: ``coa view`` on a large artifact: the page written, then opened in headless Chromium.

Builds a ``trajectory.v1`` artifact of ``--episodes`` runs (the offline teacher's runs of
``tests/fixtures/trajectories.parquet``, repeated under new run ids), then times, in the same
process: reading its table (``coa.io.read_table``: the baseline) and writing the viewer's page
(``coa.view``: read, sample to ``--cap``, render, write), as a ratio. With Chromium installed it also
opens the page: the wall time of ``chromium --headless --screenshot`` of it (load, script, first
paint) against the same on an empty page (Chromium's own start: the baseline), and the page's own
clock at its first render (``performance.now()`` from navigation start: parse, JSON, filters, the
first page of episodes; read from ``--dump-dom``, whose own wall time is mostly the serialising of
the page's embedded data back out, so it is not timed). Last, what the runner's hook
(:mod:`coa.view.commit`) adds to a step that stages such a table: its page of at most
:data:`~coa.view.commit.SAMPLE_CAP` episodes, against the staging of the table alone.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from harness import Bench, main

import schemas
from coa import io
from coa.view import episodes, page
from coa.view.commit import PAGE_FILE, SAMPLE_CAP, commit_page

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "trajectories.parquet"


def build(n: int) -> pa.Table:
    """``n`` runs: the fixture's runs repeated, each with its own run id."""
    rows = pq.read_table(FIXTURE).to_pylist()
    out = [{**rows[i % len(rows)], "run_id": f"{rows[i % len(rows)]['run_id']}-{i}"} for i in range(n)]
    return schemas.TRAJECTORY.from_rows(out)


def open_page(chromium: str, path: Path) -> tuple[float, int | None]:
    """(wall seconds of a headless Chromium screenshotting the page, the page's ready time in ms)."""
    profile = tempfile.mkdtemp(prefix="coa-chromium-")
    flags = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
    try:
        start = time.perf_counter()
        shot = path.with_suffix(".png")
        subprocess.run([*flags, f"--screenshot={shot}", path.as_uri()], capture_output=True, timeout=600)
        wall = time.perf_counter() - start
        done = subprocess.run(
            [*flags, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=600
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    ready = done.stdout.split('data-ready-ms="', 1)
    return wall, int(ready[1].split('"', 1)[0]) if len(ready) == 2 else None


def run(args, bench: Bench) -> None:
    n = 2_000 if args.quick else args.episodes
    with tempfile.TemporaryDirectory() as root:
        store = io.Store(root)
        writer = store.writer("trajectories", "bench", {"episodes": n})
        writer.write_table("trajectories", build(n), schemas.TRAJECTORY)
        ref = writer.commit()
        out = Path(root) / "episodes.html"
        read = bench.time("read the table (coa.io.read_table)", lambda: io.read_table(ref), args.repeat)
        wrote = bench.time(
            "write the page (coa.view)",
            lambda: page.write(episodes.load(ref.uri, cap=args.cap), out),
            args.repeat,
        )
        bench.ratio("page / read", wrote, read)
        bench.figure("episodes", n)
        bench.figure("on the page", min(n, args.cap))
        bench.figure("page MB", round(out.stat().st_size / 1e6, 1))
        # what the runner's hook adds to a step that stages this table (coa.view.commit: a sample of
        # SAMPLE_CAP, staged with the table): the step's own staging of the table is the baseline
        table = build(n)

        def stage(with_page: bool) -> None:
            w = store.writer("trajectories", "staged", {"episodes": n, "page": with_page})
            w.write_table("trajectories", table, schemas.TRAJECTORY)
            if with_page:
                commit_page(w)
                staged_page.append(w.fs.size(f"{w.staging}/{PAGE_FILE}"))
            w.abort()

        staged_page: list[int] = []
        alone = bench.time("stage the table (a step's own write)", lambda: stage(False), args.repeat)
        paged = bench.time(
            f"stage the table and its page (coa.view.commit, {SAMPLE_CAP:,} at most)",
            lambda: stage(True),
            args.repeat,
        )
        bench.ratio("with the page / without", paged, alone)
        bench.figure("committed page MB", round(staged_page[-1] / 1e6, 1))
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            print("chromium not found: the page was not opened (apt-get install chromium)")
            return
        blank = Path(root) / "blank.html"
        blank.write_text("<!doctype html><html><body data-ready-ms='0'></body></html>")
        walls, ready = [], []
        base = [open_page(chromium, blank)[0] for _ in range(args.repeat)]
        for _ in range(args.repeat):
            wall, ms = open_page(chromium, out)
            walls.append(wall)
            if ms is not None:
                ready.append(ms / 1000)
        empty = bench.add_timing("chromium: an empty page", base)
        opened = bench.add_timing("chromium: the page", walls)
        bench.ratio("page / empty page (chromium)", opened, empty)
        if ready:
            bench.add_timing("page ready (its own performance.now())", ready)


def arguments(p) -> None:
    p.add_argument("--episodes", type=int, default=100_000, help="runs in the artifact (default 100,000)")
    p.add_argument("--cap", type=int, default=episodes.DEFAULT_CAP, help="coa view --cap")


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
