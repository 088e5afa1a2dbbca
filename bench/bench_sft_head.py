"""CPU SFT speed of the tiny student with TRL's fused LM head (baseline) and the model's own loss head.

Both runs go through ``coa.train.sft.run_sft`` on the same ``sft.v1`` examples, the same model
(``coa model init``'s tiny student) and the same steps; only ``fused_lm_head`` differs. It reports
tokens/s and seconds per step of each, and the plain head's speed as a ratio of the fused head's,
measured in the same command, plus the first logged losses of both (they should agree).

    python bench/bench_sft_head.py --data <converted artifact or sft.parquet> --model <student folder> \
        [--steps 80] [--batch-size 4] [--families math,code]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

import torch

from coa import io
from coa.train.config import SFTRunConfig
from coa.train.sft import run_sft
from coa.train.step import select_examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="converted artifact URI or an sft.v1 Parquet file")
    parser.add_argument("--model", required=True, help="student model folder")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--families", default="math,code")
    args = parser.parse_args()

    parquet = args.data.endswith(".parquet")
    table = io.read_parquet_file(args.data) if parquet else io.read_table(args.data, "sft")
    examples = select_examples(table, args.families.split(","))
    results: dict[str, dict[str, Any]] = {}
    for name, fused in (("fused (baseline)", True), ("plain", False)):
        config = SFTRunConfig(
            base_model=args.model, max_steps=args.steps, batch_size=args.batch_size, learning_rate=2e-3,
            logging_steps=10, save_steps=10 * args.steps, max_length=1024, fused_lm_head=fused,
        )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="coa-bench-head-") as out:
            r = run_sft(examples, config, out)
        results[name] = {
            "tokens_per_s": r.tokens_per_s,
            "s_per_step": round(r.train_runtime_s / r.steps_run, 4),
            "first_losses": [round(loss, 4) for _, loss in r.loss_curve[:3]],
        }
        print(name, json.dumps(results[name]), flush=True)
    ratio = results["plain"]["tokens_per_s"] / results["fused (baseline)"]["tokens_per_s"]
    print(f"plain head / fused head tokens/s: {ratio:.2f}x  ({args.steps} steps, batch {args.batch_size}, "
          f"{torch.get_num_threads()} threads)")  # fmt: skip


if __name__ == "__main__":
    main()
