"""What SFT's held-out loss costs a profile's SFT: one held-out pass with its examples batched by
length (as ``HeldoutLoss`` does since 2026-11-28) against batched in the split's order (before),
timed in one command, each pass repeated and interleaved; the training step's seconds from a run
with the pass at the last step only; and from those, the share of SFT time the pass adds at each
``eval_steps``. (Two whole runs that differ only in ``eval_steps`` differ by less than this host's
run-to-run noise, ±15% on 2 shared cores, so the share is computed from the timed pass, not from
their difference.)

The runs go through ``coa.train.sft.run_sft`` with the profile's ``sft`` settings (batch, length,
learning rate, ``repeat``, families) on the same examples and student. The held-out pass runs under
``no_grad`` and draws no random numbers, so a second run with the pass every ``min(--every)`` steps
must end with the first run's weights, bit for bit: the bench checks it.

    python bench/bench_sft_heldout.py --data <store>/converted/<artifact>/sft.parquet \
        --model <store>/model/<tiny-student artifact>/model [--profile configs/demo.yaml] \
        [--steps 300] [--every 50,250] [--json F]
    python bench/bench_sft_heldout.py --quick   # a tiny student and 64 examples built, 20 steps
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from harness import Bench, main
from transformers import AutoModelForCausalLM

from coa import io
from coa.config import load_yaml_layers
from coa.train.config import SFTRunConfig, SFTStageConfig
from coa.train.data import select_examples
from coa.train.sft import run_sft

PASSES = ("in split order (before)", "by length")


def heldout_pass_seconds(
    model: str, examples: Any, params: dict[str, Any], repeats: int = 5
) -> dict[str, Any]:
    """One held-out pass over the run's held-out split, by length and in the split's order."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from coa.train.data import encode_examples
    from coa.train.sft_trainer import HeldoutLoss, split_heldout

    config = SFTRunConfig(base_model=model, max_steps=1, **params)
    tokenizer = AutoTokenizer.from_pretrained(model)
    _, heldout_rows = split_heldout(examples, config.heldout_fraction, config.heldout_max_examples)
    heldout = encode_examples(heldout_rows, tokenizer, config.max_length)
    trainer = SimpleNamespace(model=AutoModelForCausalLM.from_pretrained(model), processing_class=tokenizer)
    by_length = HeldoutLoss(trainer, heldout, every=1, batch_size=config.batch_size)
    in_order = HeldoutLoss(trainer, heldout, every=1, batch_size=config.batch_size)
    n, b = len(heldout.input_ids), config.batch_size
    in_order.batches = [list(range(start, min(n, start + b))) for start in range(0, n, b)]
    out: dict[str, Any] = {"examples": n, "tokens": heldout.n_tokens}
    callbacks = dict(zip(PASSES, (in_order, by_length), strict=True))
    seconds: dict[str, list[float]] = {name: [] for name in callbacks}
    losses: dict[str, float] = {}
    for name, callback in callbacks.items():
        losses[name] = callback.loss()  # warm-up
    for _ in range(repeats):
        for name, callback in callbacks.items():
            start = time.perf_counter()
            callback.loss()
            seconds[name].append(time.perf_counter() - start)
    for name, callback in callbacks.items():
        padded = sum(len(batch) * max(len(heldout.input_ids[i]) for i in batch) for batch in callback.batches)
        out[name] = {
            "s": round(statistics.median(seconds[name]), 3),
            "loss": losses[name],
            "padded_tokens": padded,
        }
    out["by length / in split order, time"] = round(out[PASSES[1]]["s"] / out[PASSES[0]]["s"], 3)
    return out


REPO = Path(__file__).resolve().parents[1]


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="converted artifact URI or an sft.v1 Parquet file (--quick: built)")
    parser.add_argument("--model", help="student model folder (--quick: built)")
    parser.add_argument(
        "--profile", type=Path, default=REPO / "configs" / "demo.yaml", help="its sft section is used"
    )
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", default="50,250", help="eval_steps to compare with the last step only")


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:
        args.steps, args.every = 20, "10"
    if args.data is None or args.model is None:
        if not args.quick:
            raise SystemExit("--data and --model are required (or --quick: both built on the spot)")
        from smoke import sft_table, tiny_student

        with tempfile.TemporaryDirectory(prefix="coa-bench-heldout-") as folder:
            args.model = args.model or str(tiny_student(folder))
            measure(args, bench, sft_table(96) if args.data is None else None)
        return
    measure(args, bench, None)


def measure(args: argparse.Namespace, bench: Bench, table: Any) -> None:
    sft = dict(load_yaml_layers(args.profile).get("sft") or {})
    unplanned = ("max_steps", "save_steps", "eval_steps", "time_budget_s", "warmup_steps", "logging_steps")
    params = {k: v for k, v in sft.items() if k in SFTStageConfig.model_fields and k not in unplanned}
    if table is None:
        parquet = args.data.endswith(".parquet")
        table = io.read_parquet_file(args.data) if parquet else io.read_table(args.data, "sft")
    families = sft.get("families")
    examples = select_examples(table, list(families)) if families else table
    report: dict[str, Any] = {
        "profile": str(args.profile),
        "steps": args.steps,
        "threads": torch.get_num_threads(),
        "heldout_pass": heldout_pass_seconds(args.model, examples, params, repeats=1 if args.quick else 5),
    }
    print("held-out pass", json.dumps(report["heldout_pass"]), flush=True)
    every = [int(e) for e in args.every.split(",")]
    runs: dict[int, Any] = {}
    weights: dict[int, dict[str, torch.Tensor]] = {}
    with tempfile.TemporaryDirectory(prefix="coa-bench-heldout-") as tmp:
        for eval_steps in (args.steps, min(every)):
            config = SFTRunConfig(
                base_model=args.model, max_steps=args.steps, eval_steps=eval_steps,
                save_steps=10 * args.steps, logging_steps=50, warmup_steps=min(30, args.steps // 10),
                **params,
            )  # fmt: skip
            runs[eval_steps] = result = run_sft(examples, config, Path(tmp) / f"every-{eval_steps}")
            model = AutoModelForCausalLM.from_pretrained(result.model_dir)
            weights[eval_steps] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    baseline, often = runs[args.steps], runs[min(every)]
    step_s = baseline.train_runtime_s / baseline.steps_run
    passes = report["heldout_pass"]
    report["step_s (pass at the last step only)"] = round(step_s, 4)
    report["share of SFT time the pass adds"] = {
        f"eval_steps={e}": {name: round(passes[name]["s"] / (e * step_s), 3) for name in PASSES}
        for e in every
    }
    report[f"weights identical with eval_steps={min(every)}"] = all(
        torch.equal(weights[min(every)][k], weights[args.steps][k]) for k in weights[args.steps]
    )
    report["final held-out loss (both runs)"] = [
        baseline.heldout_loss_curve[-1][1],
        often.heldout_loss_curve[-1][1],
    ]
    print(json.dumps(report, indent=2))
    for name in PASSES:
        bench.figure(f"held-out pass {name} s (median)", passes[name]["s"])
    bench.ratio("held-out pass by length / in split order", passes[PASSES[1]]["s"], passes[PASSES[0]]["s"])
    bench.add_timing("SFT step (pass at the last step only)", [step_s])
    for key, value in report.items():
        if key not in ("heldout_pass", "profile", "steps", "threads"):
            bench.figure(key, value)


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
