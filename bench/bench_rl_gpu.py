"""One RL run of a real-architecture student on one GPU (the worker's code path), and where its time goes.

Builds (or reuses) the random-init Qwen2.5-0.5B-shaped model of ``bench_sft_gpu.py`` (nothing is
downloaded), then runs ``accelerate launch --config_file infra/accelerate/single_gpu.yaml -m
coa.rl.grpo --config resolved.yaml`` on the demo's ``rl_prompt.v1`` rows for a fixed number of
steps, and reports from the run's own records (``rl_result.json`` and its ``rollout.v1`` table):
rollout tokens/s (completion tokens generated ÷ generation wall time), the split of a step into
generation / tools / training, and optimizer steps per second. A random-init
student writes no tool calls worth running, so the tool share is a floor; the figures say what
the engine and the trainer cost, not what the policy earns.

    python bench/bench_rl_gpu.py --prompts rl.parquet --sft-data sft.parquet --out /tmp/bench-rl \\
        [--steps 6] [k=v ...]          # extra k=v go to the run config, e.g. rollout.backend=hf_batched
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sft_gpu import build_model, profile_student  # noqa: E402  (the same models as the SFT bench)


def launch(model: Path, prompts: Path, out: Path, steps: int, overrides: list[str]) -> tuple[dict, float]:
    config = {
        "base_model": str(model), "prompts": str(prompts), "output_dir": str(out), "max_steps": steps,
        "learning_rate": 1e-6, "save_steps": 10_000, "logging_steps": 1, "prompts_per_step": 8,
        "group_size": 8, "max_total_tokens": 1024, "heldout_eval_steps": None,
        # a random-init student earns no reward: every group has zero variance, and dynamic sampling
        # would refill each batch (5x the episodes a step on CPU, 2026-11-27); the bench times one batch
        "max_refill_rounds": 0,
    }  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)  # a fresh run each time (never a resume of the last bench)
    out.mkdir(parents=True)
    resolved = out / "resolved.yaml"
    resolved.write_text(yaml.safe_dump(config))
    accelerate_config = str(REPO / "infra" / "accelerate" / "single_gpu.yaml")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config,
           "-m", "coa.rl.grpo", "--config", str(resolved), *overrides]  # fmt: skip
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return json.loads((out / "rl_result.json").read_text()), wall


PARTS = ("generation_s", "tools_s", "training_s")


def split(result: dict) -> dict[str, float]:
    """Generation / tools / training seconds over the run, from the per-step curves."""
    curves = result["curves"]
    tools = sum(float(c.get("rollout/tool_s", 0.0)) for c in curves)
    generation = sum(float(c.get("rollout/wall_s", 0.0)) for c in curves) - tools
    total = float(result["train_runtime_s"])
    return {
        "generation_s": round(generation, 2),
        "tools_s": round(tools, 2),
        "training_s": round(max(total - generation - tools, 0.0), 2),
        "total_s": round(total, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=Path, required=True, help="rl_prompt.v1 Parquet file")
    parser.add_argument("--sft-data", type=Path, required=True, help="sft.v1 rows (trains the tokenizer)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--model", type=Path, help="an HF model folder instead of the Qwen2.5-0.5B shape")
    parser.add_argument(
        "--profile", type=Path, help="a profile's random-init student (e.g. configs/demo-gpu.yaml)"
    )
    parser.add_argument("overrides", nargs="*", help="k=v for the run config")
    ns = parser.parse_args()
    import torch

    folder = ns.out / "qwen2.5-0.5b-arch"
    if ns.profile is not None:
        model = ns.model or profile_student(ns.profile, ns.sft_data, ns.out)[0]
    else:
        model = ns.model or (
            folder if (folder / "config.json").exists() else build_model(ns.sft_data, ns.out)
        )
    result, wall = launch(model, ns.prompts, ns.out / "rl", ns.steps, ns.overrides)
    rollouts = pq.read_table(result["rollouts_file"], columns=["completion_ids"])
    generated = int(pc.sum(pc.list_value_length(rollouts.column("completion_ids"))).as_py() or 0)
    times = split(result)
    report = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "model": str(ns.profile or ns.model or "qwen2.5-0.5b-arch"),
        "overrides": ns.overrides,
        "steps": result["global_step"],
        "episodes": result["rollouts"],
        "completion_tokens": generated,
        "rollout_tokens_per_s": round(generated / max(times["generation_s"], 1e-9), 1),
        "optimizer_steps_per_s": round(result["global_step"] / max(times["total_s"], 1e-9), 4),
        "split": times,
        "split_share": {k: round(times[k] / max(times["total_s"], 1e-9), 3) for k in PARTS},
        "launch_wall_s": round(wall, 1),
    }
    (ns.out / "bench_rl_gpu.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
