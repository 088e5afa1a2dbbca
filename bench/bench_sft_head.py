"""CPU SFT speed of the tiny student: TRL's fused LM head, the model's own head at every position, and
the head only at trained positions (``head_positions``).

Every run goes through ``coa.train.sft.run_sft`` on the same ``sft.v1`` examples, the same model
(``coa model init``'s tiny student) and the same steps; only ``fused_lm_head`` / ``head_positions``
differ. The two plain heads run twice, interleaved (all, trained, all, trained), so a host that
changes speed mid-bench moves both. It reports tokens/s and seconds per step of each, the ratio of
trained positions to every position (and of the plain head to the fused one), and the first logged
losses (they should agree).

    python bench/bench_sft_head.py --data <converted artifact or sft.parquet> --model <student folder> \
        [--steps 80] [--batch-size 4] [--families math,code] [--max-length 1024] [--json F]
    python bench/bench_sft_head.py --quick   # a tiny student and 64 arithmetic examples built on the spot
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

import torch
from harness import Bench, main

from coa import io
from coa.train.config import SFTRunConfig
from coa.train.sft import run_sft
from coa.train.step import select_examples


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="converted artifact URI or an sft.v1 Parquet file (--quick: built)")
    parser.add_argument("--model", help="student model folder (--quick: built)")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--families", default="math,code")
    parser.add_argument("--max-length", type=int, default=1024)


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:
        args.steps = 4
    if args.data is None or args.model is None:
        if not args.quick:
            raise SystemExit("--data and --model are required (or --quick: both built on the spot)")
        from smoke import sft_table, tiny_student

        with tempfile.TemporaryDirectory(prefix="coa-bench-head-") as folder:
            args.model = args.model or str(tiny_student(folder))
            measure(args, bench, sft_table() if args.data is None else None)
        return
    measure(args, bench, None)


def measure(args: argparse.Namespace, bench: Bench, table: Any) -> None:
    if table is None:
        parquet = args.data.endswith(".parquet")
        table = io.read_parquet_file(args.data) if parquet else io.read_table(args.data, "sft")
    examples = select_examples(table, args.families.split(","))
    results: dict[str, list[dict[str, Any]]] = {}
    arms = [("fused", True, "all"), ("all positions", False, "all"), ("trained positions", False, "trained"),
            ("all positions", False, "all"), ("trained positions", False, "trained")]  # fmt: skip
    if args.quick:  # each arm once
        arms = arms[:3]
    for name, fused, where in arms:
        config = SFTRunConfig(
            base_model=args.model, max_steps=args.steps, batch_size=args.batch_size, learning_rate=2e-3,
            logging_steps=10, save_steps=10 * args.steps, max_length=args.max_length, fused_lm_head=fused,
            head_positions=where, eval_steps=10 * args.steps,
        )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="coa-bench-head-") as out:
            r = run_sft(examples, config, out)
        run = {
            "tokens_per_s": r.tokens_per_s,
            "s_per_step": round(r.train_runtime_s / r.steps_run, 4),
            "first_losses": [round(loss, 4) for _, loss in r.loss_curve[:3]],
        }
        results.setdefault(name, []).append(run)
        print(name, json.dumps(run), flush=True)

    def rate(name: str) -> float:
        return sum(run["tokens_per_s"] for run in results[name]) / len(results[name])

    trained, every = rate("trained positions"), rate("all positions")
    print(f"trained positions / all positions tokens/s: {trained / every:.3f}x; all positions / fused head: "
          f"{every / rate('fused'):.2f}x  ({args.steps} steps, batch {args.batch_size}, "
          f"{torch.get_num_threads()} threads)")  # fmt: skip
    for name, runs in results.items():
        bench.add_timing(f"{name} s per step", [run["s_per_step"] for run in runs])
        bench.figure(f"{name} tokens/s", rate(name))
        bench.figure(f"{name} first losses", runs[0]["first_losses"])
    bench.ratio("trained / all positions tokens/s", trained, every)
    bench.ratio("all positions / fused head tokens/s", every, rate("fused"))


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
