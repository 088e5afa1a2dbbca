"""What a step leaves resident: the demo's evaluation run twice in one process, RSS after each run,
after ``gc.collect`` and after glibc's ``malloc_trim`` (what the runner now does after every build).

    python bench/bench_step_memory.py MODEL_FOLDER TASKS_ARTIFACT   # the tasks artifact's heldout table
"""

import ctypes
import gc
import os
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq


def rss() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


from coa.evaluate.generation import open_policy  # noqa: E402
from coa.evaluate.stage import evaluate_tasks  # noqa: E402
from coa.plan import load_pipeline_config  # noqa: E402
from coa.tools.config import build_toolbox  # noqa: E402

model, tasks_uri = sys.argv[1], sys.argv[2]
cfg = load_pipeline_config("configs/demo.yaml")
ev = cfg.evaluate
tasks = pq.read_table(Path(tasks_uri) / "heldout.parquet")
toolbox = build_toolbox(cfg.collect.tools, None)
print(f"start {rss():.0f} MiB", flush=True)
for round_ in range(2):
    policy = open_policy(ev, model)
    print(f"[{round_}] policy loaded {rss():.0f} MiB", flush=True)
    t = time.time()
    out = evaluate_tasks(tasks, policy, toolbox, ev)
    print(f"[{round_}] evaluated {out.num_rows} rows in {time.time() - t:.0f}s: {rss():.0f} MiB", flush=True)
    close = getattr(policy, "close", None)
    if close:
        close()
    del policy, out
    gc.collect()
    print(f"[{round_}] after del+gc {rss():.0f} MiB", flush=True)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"[{round_}] after malloc_trim {rss():.0f} MiB", flush=True)
