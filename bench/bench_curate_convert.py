"""Benchmark: curate + convert on a generated set of ``trajectory.v1`` runs, against a plain Parquet scan.

The data: the offline rule-based teacher (``coa.teacher.open_teacher``, real tools, recording
off) solves a few hundred synthetic train tasks (``coa.synthetic.generate_all``: arithmetic ->
math, multihop -> mhqa, programming -> code), ``--samples`` runs per task (default 1, as in
``configs/demo.yaml``; with more, the offline teacher's samples of a task are often identical,
since it only varies on its seeded slips, and curate drops them as exact duplicates: the count is
printed). Those template runs
are then replicated at the Arrow level into ``--rows`` rows (default 100,000) without running the
teacher again: every replicated task gets a new ``task_id`` and its template's runs (new
``run_id``s); its question is the template's question followed by a bracketed tail of 12
pseudo-random tokens derived from its id, so that neither exact nor near (MinHash) deduplication
collapses the replicas of one template. On top of that, a known share of rows are injected
duplicates:

* ``--dup-share`` (default 5%): a verbatim copy of an earlier row (same task, question and steps,
  new ``run_id``) -> ``exact_duplicate`` when the original was kept;
* ``--near-share`` (default 2%): a new task whose question is an earlier task's question plus one
  word -> ``near_duplicate`` when the original was kept.

A matching ``task.v1`` table (code tasks carry their template's ``test_cases``) and a held-out
benchmark (the synthetic held-out split, for decontamination) are written as task artifacts; the
raw runs are streamed into a trajectory artifact with the store's table writer, one row group of
10,000 rows per write.

Code-family rows are scored in curate by running the task's tests in the bubblewrap sandbox, one
sandbox per test case (~40 ms each, ~5 cases a task), so ``--code-share`` (default 0.5% of the
tasks) is kept small to bound the run time; the time spent in that scoring is measured separately
and the curate throughput without it is printed as well.

Phases, each in a fresh ``spawn`` subprocess so its peak RSS (``ru_maxrss``, includes the
interpreter and imports; the RSS after imports is shown too) is its own:

1. ``scan`` (baseline): ``pyarrow.parquet.ParquetFile(...).iter_batches`` over every row group of
   the raw file, all columns decoded and touched; best of 3 (curate and convert run once); its
   peak RSS is read (``VmHWM``) after the first pass;
2. ``curate``: the curate step (:func:`coa.curate.step.step` through :func:`coa.steps.run_step`)
   with ``configs/demo.yaml``'s curate settings (the ones for the synthetic families: scoring,
   filters incl. the CoA check, exact and near dedup, the great-expectations gate, report) plus
   decontamination against the held-out benchmark;
3. ``convert``: the convert step with the default ``ConvertConfig`` (Qwen2.5 token counts) on the
   curated artifact; its peak RSS is read before the tokenizer baseline: the bare fast tokenizer
   (tiktoken's ``encode_batch``) on a sample of the very texts convert counted, against convert's
   own counting of them (each distinct text once) and its batch counter on every text; then the
   CoA check once: the SFT examples of the first ``COA_SAMPLE`` curated runs made with curate's
   rendering reused (as convert does) against the same runs converted again (CPU time, best of 2).

Figures: wall time and rows/s per phase against the scan, CPU time of each phase's process (the
machine is shared, so CPU-time ratios are the steadier ones; the sandbox's subprocesses are not
in them), curate throughput without sandbox scoring as a share of the scan's, the peak RSS per
phase and the dedup + statistics state. For the memory slope, run it at several ``--rows``.

Imports and the tokenizer load are done before each phase's clock starts. Run with
``python bench/bench_curate_convert.py [--rows N] [--quick] [--profile] [--json F]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import multiprocessing as mp
import random
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from harness import Bench, main

CHUNK_ROWS = 10_000  # rows per write = one row group of the raw file
COA_SAMPLE = 10_000  # curated runs converted both ways (the CoA check once)
TOKENIZER_SAMPLE = 30_000  # texts of the first convert batches timed against the bare tokenizer


@dataclasses.dataclass(frozen=True)
class Options:
    rows: int
    templates: int
    samples: int
    code_share: float
    dup_share: float
    near_share: float
    seed: int
    profile: bool


# -- memory ---------------------------------------------------------------------------------


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _child(conn: Any, fn_name: str, args: tuple[Any, ...]) -> None:
    try:
        fn = globals()[fn_name]
        result = fn(*args)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        conn.send(("ok", result, peak))
    except BaseException as e:  # report, do not hang the parent
        import traceback

        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}", 0.0))
    finally:
        conn.close()


def in_subprocess(fn_name: str, *args: Any) -> tuple[dict[str, Any], float]:
    """Run ``fn_name(*args)`` in a fresh spawned interpreter; (its result, its peak RSS in MB)."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn_name, args))
    proc.start()
    child.close()
    status, result, peak = parent.recv()
    proc.join()
    if status != "ok":
        raise RuntimeError(f"phase {fn_name} failed in its subprocess:\n{result}")
    return result, peak


# -- data -----------------------------------------------------------------------------------


def _template_counts(templates: int) -> dict[str, int]:
    code = max(4, templates // 10)
    rest = templates - code
    return {"arithmetic": rest // 2, "multihop": rest - rest // 2, "programming": code}


def _tail(key: str) -> str:
    """12 pseudo-random tokens unique to ``key``: every question shingle touching it is unique."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    tokens = [digest[i : i + 5] for i in range(0, 60, 5)]
    return "[ref " + " ".join(tokens) + "]"


def _teacher_runs(tasks: pa.Table, samples: int, concurrency: int = 8) -> list[dict[str, Any]]:
    from coa.collect.config import CollectConfig
    from coa.collect.teacher import open_teacher
    from coa.synthetic import SyntheticConfig, encyclopedia_table
    from coa.tools.collection import Collection

    synthetic = SyntheticConfig()  # the encyclopedia the tasks were drawn from (the default one)
    pages = Collection.from_table(
        encyclopedia_table(synthetic.encyclopedia_seed, synthetic.encyclopedia_size)
    )

    async def run() -> list[dict[str, Any]]:
        config = CollectConfig(backend="offline", tools={"record": "off"})  # type: ignore[arg-type]
        sem = asyncio.Semaphore(concurrency)
        async with open_teacher(config, None, pages) as teacher:

            async def one(task: dict[str, Any], k: int) -> dict[str, Any]:
                async with sem:
                    return await teacher.solve(task, k, run_id=f"{task['task_id']}#{k}")

            return list(await asyncio.gather(*(one(t, k) for t in tasks.to_pylist() for k in range(samples))))

    return asyncio.run(run())


def phase_generate(root: str, opt: Options) -> dict[str, Any]:
    """Template runs from the offline teacher, replicated into ``opt.rows`` raw rows + tasks."""
    import schemas
    from coa import io
    from coa.synthetic import SyntheticConfig, generate_all

    t0 = time.perf_counter()
    synth = generate_all(
        SyntheticConfig(
            train=_template_counts(opt.templates),  # type: ignore[arg-type]
            heldout={"arithmetic": 50, "multihop": 50, "programming": 25},
            seed=opt.seed,
        )
    )
    templates_tasks = synth["train"]
    runs = _teacher_runs(templates_tasks, opt.samples)
    teacher_s = time.perf_counter() - t0
    from coa.curate.dedup import content_hashes

    hashes = content_hashes(schemas.TRAJECTORY.from_rows(runs)).tolist()
    seen = {(r["task_id"], h) for r, h in zip(runs, hashes, strict=True)}
    same_samples = len(runs) - len(seen)  # samples identical to an earlier sample of their task

    store = io.Store(root)
    bench_writer = store.writer("tasks", "bench-heldout", {"seed": opt.seed})
    bench_writer.write_table("heldout", synth["heldout"], schemas.TASK)
    bench_ref = bench_writer.commit()

    # template tables: the tasks, and their runs grouped per task (sample order)
    t_rows = templates_tasks.to_pylist()
    template_runs = schemas.TRAJECTORY.from_rows(runs)
    runs_of: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        runs_of.setdefault(r["task_id"], []).append(i)
    by_family: dict[str, list[int]] = {}
    for i, t in enumerate(t_rows):
        by_family.setdefault(t["family"], []).append(i)
    non_code = by_family.get("math", []) + by_family.get("mhqa", [])
    code = by_family.get("code", [])

    rng = random.Random(opt.seed)
    # what each output row is: (template run index, task_id, question, sample_index)
    row_plan: list[tuple[int, str, str, int]] = []
    # each output task: (task_id, template task index, question)
    task_plan: list[tuple[str, int, str]] = []
    injected: Counter[str] = Counter()
    while len(row_plan) < opt.rows:
        u = rng.random()
        if u < opt.dup_share and row_plan:
            run_index, task_id, question, sample = row_plan[rng.randrange(len(row_plan))]
            row_plan.append((run_index, task_id, question, sample + opt.samples))
            injected["exact_duplicate_rows"] += 1
            continue
        new_id = f"bench:{len(task_plan):07d}"
        if u < opt.dup_share + opt.near_share and task_plan:
            _, template, question = task_plan[rng.randrange(len(task_plan))]
            question = question + " please"
            injected["near_duplicate_tasks"] += 1
        else:
            pool = code if code and rng.random() < opt.code_share else non_code
            template = pool[rng.randrange(len(pool))]
            question = f"{t_rows[template]['question']} {_tail(new_id)}"
        task_plan.append((new_id, template, question))
        for k, run_index in enumerate(runs_of[t_rows[template]["task_id"]]):
            if len(row_plan) < opt.rows:
                row_plan.append((run_index, new_id, question, k))
    if injected["near_duplicate_tasks"]:
        injected["near_duplicate_rows"] = sum(1 for _, _, q, _ in row_plan if q.endswith(" please"))

    # task.v1 of the replicated tasks (one table)
    task_table = templates_tasks.take(pa.array([t for _, t, _ in task_plan], pa.int64()))
    task_table = _replace(
        task_table,
        task_id=pa.array([t for t, _, _ in task_plan], pa.string()),
        source=pa.array(["bench-synthetic"] * len(task_plan), pa.string()),
        question=pa.array([q for _, _, q in task_plan], pa.string()),
        source_index=pa.array(range(len(task_plan)), pa.int64()),
    )
    task_writer = store.writer("tasks", "bench-tasks", {"rows": opt.rows, "seed": opt.seed})
    task_writer.write_table("train", task_table, schemas.TASK)
    tasks_ref = task_writer.commit()

    raw_writer = store.writer(
        "trajectories", "bench-raw", {"rows": opt.rows, "seed": opt.seed}, upstream=[tasks_ref]
    )
    families: Counter[str] = Counter()
    with raw_writer.table_writer("trajectories", schemas.TRAJECTORY) as write:
        for start in range(0, len(row_plan), CHUNK_ROWS):
            part = row_plan[start : start + CHUNK_ROWS]
            chunk = template_runs.take(pa.array([p[0] for p in part], pa.int64()))
            chunk = _replace(
                chunk,
                run_id=pa.array([f"{p[1]}#{p[3]}@{start + j}" for j, p in enumerate(part)], pa.string()),
                task_id=pa.array([p[1] for p in part], pa.string()),
                question=pa.array([p[2] for p in part], pa.string()),
                sample_index=pa.array([p[3] for p in part], pa.int32()),
            )
            families.update(chunk.column("family").to_pylist())
            write(chunk)
    raw_ref = raw_writer.commit()
    path = Path(raw_ref.uri) / "trajectories.parquet"
    meta = pq.ParquetFile(path).metadata
    return {
        "raw": raw_ref,
        "tasks": tasks_ref,
        "bench": bench_ref,
        "path": str(path),
        "file_mb": path.stat().st_size / 1e6,
        "row_groups": meta.num_row_groups,
        "rows": meta.num_rows,
        "tasks_n": len(task_plan),
        "template_tasks": len(t_rows),
        "template_runs": len(runs),
        "template_status": dict(Counter(r["status"] for r in runs)),
        "template_same_samples": same_samples,
        "families": dict(families),
        "injected": dict(injected),
        "seconds": time.perf_counter() - t0,
        "teacher_s": teacher_s,
    }


def _replace(table: pa.Table, **columns: pa.Array) -> pa.Table:
    for name, values in columns.items():
        table = table.set_column(table.schema.get_field_index(name), name, values)
    return table


# -- phases ---------------------------------------------------------------------------------


def _profiled(enabled: bool, fn: Any) -> tuple[Any, str]:
    if not enabled:
        return fn(), ""
    import cProfile
    import io as _io
    import pstats

    prof = cProfile.Profile()
    result = prof.runcall(fn)
    out = _io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(r"coa/|schemas/|great_expectations/core|pyarrow/parquet", 45)
    stats.sort_stats("tottime").print_stats(25)
    return result, out.getvalue()


def phase_scan(path: str, repeat: int = 3) -> dict[str, Any]:
    """Baseline: every row group, every column decoded (and touched) by a plain Parquet scan.

    The scan is cheap, so it is repeated and the best time is kept (as in bench_contract.py);
    all the times are returned too, and the peak RSS after the first pass (later passes only add
    what Arrow's memory pool keeps).
    """
    rss0 = _status_mb("VmRSS")
    times: list[float] = []
    cpu: list[float] = []
    first_peak = 0.0
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        pf = pq.ParquetFile(path)
        rows = touched = 0
        for batch in pf.iter_batches(batch_size=CHUNK_ROWS):
            for column in batch.columns:
                touched += column.nbytes
            rows += batch.num_rows
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        first_peak = first_peak or _status_mb("VmHWM")
    return {
        "seconds": min(times),
        "cpu_s": min(cpu),
        "times": times,
        "rows": rows,
        "decoded_mb": touched / 1e6,
        "rss_start_mb": rss0,
        "first_pass_peak_mb": first_peak,
    }


def _warm_curate() -> None:
    import great_expectations  # noqa: F401
    import polars  # noqa: F401

    import coa.curate.expectations  # noqa: F401
    import coa.curate.step  # noqa: F401
    import coa.scoring  # noqa: F401


def phase_curate(root: str, raw: Any, tasks: Any, bench_uri: str, profile: bool) -> dict[str, Any]:
    from coa import io
    from coa.curate import step as curate_step
    from coa.curate.config import CurateConfig, DecontamConfig, DedupConfig, FilterConfig, GateConfig
    from coa.steps import StepCheckFailed, TableInput, run_step

    _warm_curate()
    rss0 = _status_mb("VmRSS")
    code = {"runs": 0, "seconds": 0.0}
    original_score = curate_step.score_code
    original_curate = curate_step.curate
    results: list[Any] = []

    def timed_score_code(batch: pa.Table, tests: Any, *args: Any) -> pa.Table:
        n = sum(1 for f in batch.column("family").to_pylist() if f == "code")
        t = time.perf_counter()
        out = original_score(batch, tests, *args)
        code["seconds"] += time.perf_counter() - t
        code["runs"] += n
        return out

    def kept_curate(*args: Any, **kwargs: Any) -> Any:
        results.append(original_curate(*args, **kwargs))
        return results[-1]

    curate_step.score_code = timed_score_code  # type: ignore[assignment]
    curate_step.curate = kept_curate  # type: ignore[assignment]
    # configs/demo.yaml's curate section (the settings for the synthetic families) + decontamination
    config = CurateConfig(
        name="bench-curated",
        filters=FilterConfig(require_correct=True, max_repeated_calls=4),
        dedup=DedupConfig(near_threshold=0.9),
        gate=GateConfig(correctness_floor=0.5),
        decontam=DecontamConfig(benchmarks=(bench_uri,)),
    )
    store = io.Store(root)
    gate_failed: list[str] = []
    step = curate_step.step(config, TableInput(raw, "trajectories"), TableInput(tasks, "train"))
    t0, c0 = time.perf_counter(), time.process_time()

    def run() -> Any:
        try:
            return run_step(step, store).ref
        except StepCheckFailed as e:  # committed anyway; measure on
            gate_failed.append(e.message)
            return io.open_artifact(e.uri)

    ref, prof = _profiled(profile, run)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    result = results[-1]
    return {
        "seconds": seconds,
        "cpu_s": cpu_s,
        "ref": ref,
        "rows_in": result.rows_in,
        "kept": result.rows_kept,
        "quarantined": result.rows_quarantined,
        "reasons": dict(sorted(result.reasons.items(), key=lambda kv: -kv[1])),
        "gate_failed": gate_failed,
        "peak_state_mb": result.peak_state_bytes / 1e6,
        "code_runs": code["runs"],
        "code_s": code["seconds"],
        "rss_start_mb": rss0,
        "profile": prof,
    }


def phase_convert(root: str, curated: Any, tasks: Any, profile: bool) -> dict[str, Any]:
    import coa.curate.step  # noqa: F401  (the convert step imports it for a name)
    from coa import io
    from coa.convert import core as convert_core
    from coa.convert import step as convert_step
    from coa.convert.config import ConvertConfig
    from coa.convert.core import batch_token_counter, token_counter
    from coa.steps import TableInput, run_step

    config = ConvertConfig(name="bench-coa")
    token_counter(config.tokenizer)("warm up")  # tokenizer load is not part of the throughput
    batch_token_counter(config.tokenizer)(["warm up"])
    texts: list[str] = []
    tok = {"seconds": 0.0, "sample_seconds": 0.0, "texts": 0}
    original = convert_core.count_tokens

    def timed_count(batch: Any, kind: str) -> list[int]:
        t = time.perf_counter()
        out = original(batch, kind)
        tok["seconds"] += time.perf_counter() - t
        tok["texts"] += len(batch)
        if len(texts) < TOKENIZER_SAMPLE:  # the baseline's texts (a bounded sample: memory)
            texts.extend(batch)
            tok["sample_seconds"] = tok["seconds"]
        return out

    convert_core.count_tokens = timed_count  # type: ignore[assignment]
    rss0 = _status_mb("VmRSS")
    store = io.Store(root)
    step = convert_step.step(config, TableInput(curated, "trajectories"), TableInput(tasks, "train"))
    t0, c0 = time.perf_counter(), time.process_time()
    result, prof = _profiled(profile, lambda: run_step(step, store))
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak = _status_mb("VmHWM")  # before the tokenizer baseline below
    sft = io.read_table(result.ref, "sft", columns=["n_tokens"])
    # baseline: the bare fast tokenizer (tiktoken's batch encode) on the very same texts, in the
    # same batches convert used (every text, repeats included)
    encoding = convert_core._qwen()._tokenizer
    bare = []
    for _ in range(2):
        t = time.perf_counter()
        for lo in range(0, len(texts), 3000):
            encoding.encode_batch(texts[lo : lo + 3000], allowed_special="all")
        bare.append(time.perf_counter() - t)
    counter = batch_token_counter(config.tokenizer)
    ours = []
    for _ in range(2):
        t = time.perf_counter()
        for lo in range(0, len(texts), 3000):
            counter(texts[lo : lo + 3000])
        ours.append(time.perf_counter() - t)
    # the CoA check once: SFT examples of the first curated runs as convert makes them (curate's
    # rendering reused) and with the rendering dropped (each run converted again), best of 2 each
    convert_core.count_tokens = original
    sample = next(io.iter_batches(curated, "trajectories", batch_rows=COA_SAMPLE)).to_pylist()
    again = [{**r, "coa_variant": None, "coa_text": None} for r in sample]
    reuse, convert_again = [], []
    for _ in range(2):
        for rows, times in ((sample, reuse), (again, convert_again)):
            t = time.process_time()
            convert_core.sft_examples(rows, config, "bench")
            times.append(time.process_time() - t)
    return {
        "coa_rows": len(sample),
        "coa_reuse_s": min(reuse),
        "coa_again_s": min(convert_again),
        "ours_all_s": min(ours),
        "seconds": seconds,
        "cpu_s": cpu_s,
        "rows_in": curated.rows("trajectories"),
        "counts": dict(result.summary),
        "sft_tokens": int(pc.sum(sft.column("n_tokens")).as_py() or 0),
        "rss_start_mb": rss0,
        "profile": prof,
        "tok_s": tok["sample_seconds"],
        "tok_all_s": tok["seconds"],
        "tok_all_texts": tok["texts"],
        "tok_texts": len(texts),
        "peak_mb": peak,
        "bare_tok_s": min(bare),
    }


# -- main -----------------------------------------------------------------------------------


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=100_000, help="raw trajectory rows (default 100000)")
    p.add_argument("--templates", type=int, default=300, help="synthetic train tasks the teacher solves")
    p.add_argument("--samples", type=int, default=1, help="teacher runs per template task (runs per task)")
    p.add_argument("--code-share", type=float, default=0.005, help="share of replicated tasks from code")
    p.add_argument("--dup-share", type=float, default=0.05, help="share of rows that are exact copies")
    p.add_argument("--near-share", type=float, default=0.02, help="share of near-duplicate tasks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="cProfile curate and convert (slower)")


def options(a: argparse.Namespace) -> Options:
    """``--quick``: 10k rows, 150 template tasks (< 2 min)."""
    if a.quick:
        a.rows, a.templates = 10_000, min(a.templates, 150)
    return Options(a.rows, a.templates, a.samples, a.code_share, a.dup_share, a.near_share, a.seed, a.profile)


def run(args: argparse.Namespace, bench: Bench) -> None:
    opt = options(args)
    print(
        f"curate+convert benchmark: rows={opt.rows} templates={opt.templates}x{opt.samples} "
        f"code_share={opt.code_share} dup_share={opt.dup_share} near_share={opt.near_share}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="coa-bench-") as root:
        gen, gen_peak = in_subprocess("phase_generate", root, opt)
        print(
            f"generated {gen['rows']} runs of {gen['tasks_n']} tasks from {gen['template_runs']} teacher "
            f"runs on {gen['template_tasks']} tasks (teacher {gen['teacher_s']:.1f}s, total "
            f"{gen['seconds']:.1f}s, peak {gen_peak:.0f} MB); file {gen['file_mb']:.1f} MB in "
            f"{gen['row_groups']} row groups; families {gen['families']}; injected {gen['injected']}; "
            f"template statuses {gen['template_status']}, template samples identical to another sample of "
            f"their task {gen['template_same_samples']}",
            flush=True,
        )
        scan, scan_peak = in_subprocess("phase_scan", gen["path"])
        print(f"scan done: {', '.join(f'{t:.2f}s' for t in scan['times'])} (best kept)", flush=True)
        cur, cur_peak = in_subprocess(
            "phase_curate", root, gen["raw"], gen["tasks"], gen["bench"].uri, opt.profile
        )
        print(f"curate done: {cur['seconds']:.1f}s", flush=True)
        con, _ = in_subprocess("phase_convert", root, cur["ref"], gen["tasks"], opt.profile)
        con_peak = con["peak_mb"]  # taken before the tokenizer baseline, which holds its texts
        print(f"convert done: {con['seconds']:.1f}s", flush=True)

    scan_rate = scan["rows"] / scan["seconds"]
    lines = [
        (
            "parquet scan (baseline)",
            scan["rows"],
            scan["seconds"],
            scan["rss_start_mb"],
            scan["first_pass_peak_mb"],
        ),
        ("curate", cur["rows_in"], cur["seconds"], cur["rss_start_mb"], cur_peak),
        ("convert", con["rows_in"], con["seconds"], con["rss_start_mb"], con_peak),
    ]
    print()
    header = f"{'phase':<26}{'rows in':>9}{'seconds':>10}{'rows/s':>11}{'x scan/row':>12}"
    header += f"{'RSS start MB':>14}{'peak RSS MB':>13}"
    print(header)
    print("-" * len(header))
    for name, rows, secs, rss0, peak in lines:
        rate = rows / secs if secs else float("inf")
        print(
            f"{name:<26}{rows:>9}{secs:>10.2f}{rate:>11.0f}{scan_rate / rate:>12.1f}"
            f"{rss0:>14.0f}{peak:>13.0f}"
        )
    total = cur["seconds"] + con["seconds"]
    total_rate = cur["rows_in"] / total
    print(
        f"{'curate + convert':<26}{cur['rows_in']:>9}{total:>10.2f}{total_rate:>11.0f}"
        f"{scan_rate / total_rate:>12.1f}{'':>14}{max(cur_peak, con_peak):>13.0f}"
    )
    print("-" * len(header))
    no_code_s = cur["seconds"] - cur["code_s"]
    print(
        f"scan: {gen['file_mb']:.1f} MB on disk, {scan['decoded_mb']:.0f} MB decoded "
        f"({scan['decoded_mb'] / scan['seconds']:.0f} MB/s); peak RSS "
        f"{scan['first_pass_peak_mb']:.0f} MB after the first pass, {scan_peak:.0f} MB after all "
        f"{len(scan['times'])}"
    )
    print(
        f"curate: kept {cur['kept']}, quarantined {cur['quarantined']} {cur['reasons']}; gate "
        f"{'FAILED ' + str(cur['gate_failed']) if cur['gate_failed'] else 'passed'}; "
        f"dedup state in memory (per-run numbers wait on disk) {cur['peak_state_mb']:.1f} MB"
    )
    if cur["code_runs"]:
        print(
            f"curate: {cur['code_runs']} code runs scored in the sandbox in {cur['code_s']:.1f}s "
            f"({1000 * cur['code_s'] / cur['code_runs']:.0f} ms/run, "
            f"{100 * cur['code_s'] / cur['seconds']:.0f}% of curate); without it "
            f"{no_code_s:.2f}s = {cur['rows_in'] / no_code_s:.0f} rows/s "
            f"({scan_rate / (cur['rows_in'] / no_code_s):.1f}x scan/row)"
        )
    scan_cpu_rate = scan["rows"] / scan["cpu_s"]
    cur_cpu_rate = cur["rows_in"] / cur["cpu_s"]
    print(
        f"CPU time (this process; the sandbox's subprocesses are not in it): scan {scan['cpu_s']:.2f}s, "
        f"curate {cur['cpu_s']:.2f}s, convert {con['cpu_s']:.2f}s; curate throughput / scan throughput = "
        f"{100 * cur_cpu_rate / scan_cpu_rate:.2f}% by CPU time, "
        f"{100 * (cur['rows_in'] / no_code_s) / scan_rate:.2f}% by wall time without the sandbox; "
        f"(curate+convert) CPU / scan CPU = {(cur['cpu_s'] + con['cpu_s']) / scan['cpu_s']:.1f}x"
    )
    print(f"convert: {con['counts']}; {con['sft_tokens']} SFT tokens (qwen2.5)")
    print(
        f"convert tokenization: {con['tok_all_texts']} texts in {con['tok_all_s']:.2f}s of "
        f"{con['seconds']:.2f}s; first {con['tok_texts']} texts in {con['tok_s']:.2f}s; bare tiktoken "
        f"encode_batch of the same texts {con['bare_tok_s']:.2f}s; ratio (bare time / convert time) "
        f"{con['bare_tok_s'] / con['tok_s']:.2f} (each distinct text encoded once); convert's batch "
        f"counter on every text {con['ours_all_s']:.2f}s: ratio {con['bare_tok_s'] / con['ours_all_s']:.2f}"
    )
    print(
        f"convert, the CoA check once: SFT examples of the first {con['coa_rows']} curated runs in "
        f"{con['coa_reuse_s']:.2f} CPU-s with curate's rendering reused, {con['coa_again_s']:.2f} CPU-s "
        f"converting each run again: {con['coa_again_s'] / con['coa_reuse_s']:.2f}x"
    )
    print(
        f"ratio: rows={opt.rows} scan={scan['seconds']:.2f}s curate={cur['seconds']:.2f}s "
        f"convert={con['seconds']:.2f}s (curate+convert)/scan={total / scan['seconds']:.1f}x"
    )
    for name, res in (("curate", cur), ("convert", con)):
        if res["profile"]:
            print(f"\n-- profile: {name} --\n{res['profile']}")
    bench.add_timing("parquet scan (baseline)", scan["times"])
    bench.add_timing("curate", [cur["seconds"]])
    bench.add_timing("convert", [con["seconds"]])
    bench.ratio(
        "curate / scan, per row (wall)", cur["seconds"] / cur["rows_in"], scan["seconds"] / scan["rows"]
    )
    bench.ratio("curate throughput / scan throughput, CPU time", cur_cpu_rate, scan_cpu_rate)
    bench.ratio("convert tokenization: bare / convert time", con["bare_tok_s"], con["tok_s"])
    bench.ratio("convert CoA check: converted again / reused", con["coa_again_s"], con["coa_reuse_s"])
    bench.figure("rows", opt.rows)
    bench.figure("peak RSS MB", {"scan": scan["first_pass_peak_mb"], "curate": cur_peak, "convert": con_peak})
    bench.figure("dedup state MB", cur["peak_state_mb"])
    bench.figure("kept", cur["kept"])
    bench.figure("quarantined", cur["reasons"])


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
