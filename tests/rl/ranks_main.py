"""An RL run as a rank of ``torchrun`` (or alone) for the multi-rank tests: ``python -m
tests.rl.ranks_main --config resolved.yaml --output-dir OUT [--resume] [--kill-after STEP [--kill-rank R]]``.

It runs :func:`coa.rl.grpo.run_rl` as ``python -m coa.rl.grpo`` does, logs ``rank R of W pid P``
(so a test counts real ranks, not what a launcher claims), and with ``--kill-after`` every rank
(or ``--kill-rank`` alone) SIGKILLs itself once the checkpoint of that step is written (a killed
worker: no cleanup, no exception handlers). ``--clock-deadline R:S`` sets rank R's refill deadline
to S seconds after training begins, whatever the time budget (a rank whose clock disagrees with rank
0's); each rank's refill decisions are printed (the ``coa.rl.refills`` log, DEBUG).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from typing import Any

from transformers import TrainerCallback

from coa import io
from coa.config import load_config
from coa.rl.config import RLRunConfig
from coa.rl.grpo import run_rl

AGREED_KEYS = (
    "reward",
    "entropy",
    "dynamic/zero_variance_share",
    "rollout/episodes",
    "rollout/truncated_share",
)


class KillAfter(TrainerCallback):
    """SIGKILL this process once the checkpoint of ``step`` is on disk."""

    def __init__(self, step: int, rank: int | None) -> None:
        self.step, self.rank = step, rank

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mine = self.rank is None or self.rank == int(os.environ.get("RANK", "0"))
        if state.global_step == self.step and mine:
            print(f"killing rank {os.environ.get('RANK', '0')} after checkpoint {self.step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


def skew_deadline(seconds: float) -> None:
    """This rank's refill deadline ``seconds`` after training begins, not the budget's."""
    from coa.rl.callbacks import Deadline

    def on_train_begin(self: Deadline, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer.coa_deadline = time.perf_counter() + seconds

    Deadline.on_train_begin = on_train_begin  # type: ignore[method-assign]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--kill-after", type=int)
    parser.add_argument("--kill-rank", type=int, help="only this rank is killed (default: every rank)")
    parser.add_argument("--clock-deadline", help="RANK:SECONDS, that rank's own refill deadline")
    ns = parser.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    logging.basicConfig(format="%(name)s %(levelname)s %(message)s")
    logging.getLogger("coa.rl").setLevel(logging.INFO)  # the rank's own lines (e.g. its FSDP2 shards)
    print(f"rank {rank} of {world} pid {os.getpid()}", flush=True)
    refills = logging.getLogger("coa.rl.refills")
    refills.setLevel(logging.DEBUG)
    refills.addHandler(logging.StreamHandler(sys.stdout))
    if ns.clock_deadline is not None and int(ns.clock_deadline.split(":")[0]) == rank:
        skew_deadline(float(ns.clock_deadline.split(":")[1]))
    config = load_config(ns.config, [], model=RLRunConfig)
    assert config.prompts is not None
    callbacks = [KillAfter(ns.kill_after, ns.kill_rank)] if ns.kill_after is not None else []
    result = run_rl(io.read_parquet_file(config.prompts), config, ns.output_dir, ns.resume, callbacks)
    # what every rank must agree on: the held-out curve, the alarm, the logged rewards and batch metrics
    agreed = {
        "heldout": result.heldout,
        "alarm": result.alarm,
        "curves": [{k: point.get(k) for k in AGREED_KEYS} for point in result.curves],
    }
    print(f"rank {rank} done: global step {result.global_step}, agreed {json.dumps(agreed)}", flush=True)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
