"""The student's pretraining step with AdamW's loop over parameters against its fused kernel, on CPU.

``coa.model.tiny.pretrain`` steps AdamW with ``fused=True``. This times one pretraining step (forward,
backward, clip, optimizer) both ways on the same model and the same random token blocks, in
interleaved rounds (loop, fused, loop, fused, ...) so a host that changes speed moves both, and
reports each one's seconds per step, the optimizer's own share, the ratio, and how far the two
runs' weights drifted apart (the kernels round differently; they compute the same update).

    python bench/bench_pretrain_adamw.py --model <student folder> [--steps 60] [--rounds 3] \\
        [--batch-size 4] [--block 256] [--json F]
    python bench/bench_pretrain_adamw.py --quick   # a tiny student built on the spot, 10 steps x 2 rounds
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from typing import Any

import torch
from harness import Bench, main


def steps(model: Any, batches: list[torch.Tensor], fused: bool) -> tuple[float, float]:
    """Seconds per step and of it the optimizer's, over ``batches`` (one step each)."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=2e-3, betas=(0.9, 0.98), weight_decay=0.01, fused=fused
    )
    total = opt = 0.0
    for batch in batches:
        start = time.perf_counter()
        model(input_ids=batch, labels=batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        before = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end = time.perf_counter()
        total, opt = total + end - start, opt + end - before
    return total / len(batches), opt / len(batches)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="student model folder (coa model init, the store's; --quick: built)")
    parser.add_argument("--steps", type=int, default=60, help="steps per round and kind")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--block", type=int, default=256)


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:
        args.steps, args.rounds, args.block = 5, 2, 64
    if args.model is None:
        if not args.quick:
            raise SystemExit("--model is required (or --quick: a tiny student built on the spot)")
        from smoke import tiny_student

        with tempfile.TemporaryDirectory(prefix="coa-bench-adamw-") as folder:
            args.model = str(tiny_student(folder))
            measure(args, bench)
        return
    measure(args, bench)


def measure(args: argparse.Namespace, bench: Bench) -> None:
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    start.train()
    generator = torch.Generator().manual_seed(0)
    size = (args.batch_size, args.block)
    batches = [
        torch.randint(0, start.config.vocab_size, size, generator=generator) for _ in range(args.steps)
    ]
    models = {"loop": copy.deepcopy(start), "fused": copy.deepcopy(start)}
    times: dict[str, list[tuple[float, float]]] = {"loop": [], "fused": []}
    for _ in range(args.rounds):
        for kind, model in models.items():
            times[kind].append(steps(model, batches, fused=kind == "fused"))
    result: dict[str, Any] = {}
    for kind, rounds in times.items():
        step = sum(t for t, _ in rounds) / len(rounds)
        result[kind] = {
            "s_per_step": round(step, 5),
            "optimizer_s": round(sum(o for _, o in rounds) / len(rounds), 5),
        }
    drift = max(
        float((a - b).detach().abs().max())
        for a, b in zip(models["loop"].parameters(), models["fused"].parameters(), strict=True)
    )
    result["fused_over_loop_steps_per_s"] = round(
        result["loop"]["s_per_step"] / result["fused"]["s_per_step"], 3
    )
    result["max_weight_difference"] = drift
    result["steps"] = args.steps * args.rounds
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result, indent=2))
    for kind, rounds in times.items():
        bench.add_timing(f"{kind} s per step", [t for t, _ in rounds])
        bench.add_timing(f"{kind} optimizer s per step", [o for _, o in rounds])
    fused, loop = bench.timings["fused s per step"], bench.timings["loop s per step"]
    bench.ratio("fused / loop s per step", fused, loop)
    bench.figure("max_weight_difference", drift)
    bench.figure("steps", result["steps"])


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
