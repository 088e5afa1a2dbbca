"""Synchronous vs asynchronous RL against a completions server whose generation time is fixed per token.

The same tiny RL run (a random tiny Qwen2 student and its CoA tokenizer, fixed optimizer steps)
in ``rl.mode: sync`` and ``rl.mode: async``, each against a fresh ``python -m coa.serve
--delay-per-token-ms D`` (every decode step lasts at least D ms, whatever the batch: a GPU
server's flat per-token cost). Episode lengths have a long tail by themselves: the random student
at T = 1 stops on any of its ~10 stop/end ids with a small, nearly constant chance per token, so a
generation's length is roughly geometric, cut at ``--max-new`` (the table prints its p50 / p90 /
max). Dynamic sampling is off in both modes (a refill round would add generation to sync only);
``steps_per_generation`` 1, so one policy version per optimizer step.

Reported per mode, from the run's own result (``rl_result.json``): optimizer steps per second over
the training loop, the trainer's idle share (time in the rollout hook: generating in sync, waiting
for groups and pushing weights in async), mean and max staleness of the trained groups (policy
versions), the share of groups dropped as stale, and async / sync steps per second.

    PYTHONPATH=. python bench/bench_rl_async.py [--steps 8] [--delay-ms 20] [--max-new 96] \\
        [--max-staleness 2] [--json rl_async.json]
    PYTHONPATH=. python bench/bench_rl_async.py --quick   # 3 steps, <= 32 tokens an episode
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import Bench, main

REPO = Path(__file__).resolve().parents[1]


def texts() -> list[str]:
    """A small CoA corpus for the tokenizer (the model stays random)."""
    out = ["system\n", "user\n", "assistant\n"]
    for i in range(300):
        a, b = 100 + 7 * i, 13 + 3 * i
        out.append(f"What is {a} + {b}?")
        out.append(f"<plan>\nAdd them.\n</plan>\n<code>\n```python\nprint({a} + {b})\n```\n</code>\n")
        out.append(f"<observation>\n{a + b}\n</observation>\n<answer>\n\\boxed{{{a + b}}}\n</answer>\n")
    return out


def prompts(n: int) -> Any:
    import schemas

    rows = []
    for i in range(n):
        a, b = 100 + i, 200 + 3 * i
        rows.append(
            {
                "prompt_id": f"m{i}@code_math",
                "task_id": f"m{i}",
                "family": "math",
                "variant": "code_math",
                "prompt": [
                    {"role": "system", "content": "Solve the task with tools."},
                    {"role": "user", "content": f"What is {a} + {b}?"},
                ],
                "gold_answers": [str(a + b)],
                "test_cases": None,
                "group_index": i,
                "teacher_pass_rate": 0.5,
                "n_teacher_runs": 2,
            }
        )
    return schemas.RL_PROMPT.from_rows(rows)


class Server:
    """``python -m coa.serve`` on a free port of 127.0.0.1."""

    def __init__(self, model: Path, delay_ms: float) -> None:
        command = [sys.executable, "-m", "coa.serve", "--model", str(model), "--port", "0", "--threads", "1"]
        command += ["--served-model-name", "student", "--delay-per-token-ms", str(delay_ms)]
        env = os.environ | {"VLLM_SERVER_DEV_MODE": "1"}  # vLLM's RL routes, which the weight push uses
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if "coa.serve:" not in line:
            raise RuntimeError(f"coa.serve did not start (exit {self.process.wait()})")
        self.url = line.split(" on ", 1)[1].strip()

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def one_mode(mode: str, model: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from coa.llm.config import EndpointConfig
    from coa.rl.config import RLRunConfig
    from coa.rl.grpo import run_rl
    from coa.tools.config import ToolsConfig

    server = Server(model, args.delay_ms)
    try:
        config = RLRunConfig(
            base_model=str(model),
            max_steps=args.steps,
            prompts_per_step=args.prompts_per_step,
            group_size=args.group_size,
            steps_per_generation=1,
            save_steps=args.steps,
            learning_rate=1e-3,
            entropy_floor=None,
            dynamic_sampling=False,
            max_turns=2,
            max_new_tokens=args.max_new,
            max_total_tokens=args.max_new,
            overlong_buffer=min(64, args.max_new),
            tools=ToolsConfig(enabled=("code",), record="off"),
            rollout={
                "backend": "server",
                "server": EndpointConfig(name="bench", base_url=server.url, model="student", timeout_s=600),
            },
            mode=mode,
            max_staleness=args.max_staleness,
            is_correction="tis" if mode == "async" else "none",
        )
        wall = time.perf_counter()
        result = run_rl(prompts(32), config, work / mode)
        wall = time.perf_counter() - wall
    finally:
        server.stop()
    rows = pq.read_table(result.rollouts_file, columns=["tokens", "kept"]).to_pylist()
    lengths = sorted(r["tokens"] for r in rows)
    stats = result.rollout_stats
    return {
        "mode": mode,
        "steps": result.global_step,
        "train_s": result.train_runtime_s,
        "wall_s": round(wall, 2),
        "steps_per_s": result.global_step / result.train_runtime_s,
        "idle_share": stats["trainer_idle_share"],
        "staleness_mean": stats["staleness_mean"],
        "staleness_max": stats["staleness_max"],
        "dropped_share": stats["stale_dropped_share"],
        "episodes": len(rows),
        "tokens_p50": lengths[len(lengths) // 2],
        "tokens_p90": lengths[int(0.9 * (len(lengths) - 1))],
        "tokens_max": lengths[-1],
        "tokens_mean": round(statistics.fmean(lengths), 1),
    }


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per mode")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="server decode step floor (ms)")
    parser.add_argument("--max-new", type=int, default=96, help="tokens per episode at most")
    parser.add_argument("--max-staleness", type=int, default=2, help="async: policy versions at most")
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:
        args.steps, args.max_new = 3, 32

    import torch

    from coa.model import TinyModelConfig, init_model

    torch.set_num_threads(1)
    tiny = TinyModelConfig(
        vocab_size=512, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = init_model(texts(), tiny, work / "model")
        results = [one_mode(mode, model, args, work) for mode in ("sync", "async")]
    sync, asyn = results
    ratio = asyn["steps_per_s"] / sync["steps_per_s"]
    print(
        f"\nRL sync vs async: {args.steps} steps, {args.prompts_per_step} x {args.group_size} episodes per "
        f"step, coa.serve with {args.delay_ms:g} ms per decode step, <= {args.max_new} tokens per episode"
    )
    print(
        "| mode | steps/s | trainer idle | staleness mean / max | dropped stale | episodes "
        "| tokens p50 / p90 / max |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['mode']} | {r['steps_per_s']:.3f} | {100 * r['idle_share']:.0f}% | "
            f"{r['staleness_mean']:.2f} / {r['staleness_max']:.0f} | {100 * r['dropped_share']:.0f}% | "
            f"{r['episodes']} | {r['tokens_p50']} / {r['tokens_p90']} / {r['tokens_max']} |"
        )
    print(f"\nasync / sync optimizer steps per second: {ratio:.2f}x (max_staleness {args.max_staleness})")
    for r in results:
        bench.add_timing(f"{r['mode']} training loop", [r["train_s"]])
        bench.figure(r["mode"], r)
    bench.ratio("async / sync optimizer steps per second", asyn["steps_per_s"], sync["steps_per_s"])


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
