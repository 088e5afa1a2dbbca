"""Colocated RL rollouts on one GPU: three ways to generate, then one RL step's generation / tools / training.

**Rollouts.** On one model in this process (bf16 on a GPU) and the same requests — ``--prompts``
``rl_prompt.v1`` rows, ``--group`` samples each, every request as long as a completion of the demo
(lengths drawn from the ``--sft-data`` examples' assistant turns, capped at ``--max-new-tokens``), at
temperature 1 — it times, each after a short warm-up:

* **ours** (``rollout.backend: hf_batched``): the project's continuous batcher
  (:class:`coa.serve.engine.ContinuousBatcher`, what :class:`~coa.rollout.policies.hf_batched.
  HFBatchedPolicy` runs), every request submitted at once, each leaving the batch at its own length;
* **transformers CB**: transformers' own continuous batching (``init_continuous_batching``'s manager,
  paged KV cache; ``generate_batch`` is the same manager), one ``add_request`` per request with its
  own ``max_new_tokens``;
* **generate**: plain ``model.generate`` on left-padded batches of ``--generate-batch`` requests, each
  batch running to its longest request (the tokens past a request's length are wasted work);

and reports the useful tokens/s of each (the requests' own lengths over the wall time) and ours ÷ each.
End-of-sequence is off in all three, so every request has its demo length whatever the weights.

**One RL step** (unless ``--rollouts-only``): ``accelerate launch --config_file
infra/accelerate/single_gpu.yaml -m coa.rl.grpo --config resolved.yaml`` on the same rows for
``--steps`` steps, and from the run's own records: rollout tokens/s, the split of a step into
generation / tools / training, optimizer steps/s. A random-init student writes no tool calls worth
running, so the tool share is a floor. ``--quick`` is the CPU dry run (tiny shape, a few short
requests, one small step: every part but the CUDA work).

    python bench/bench_rl_gpu.py --prompts rl.parquet --encyclopedia encyclopedia.parquet \\
        --sft-data sft.parquet --out /tmp/bench-rl \\
        [--steps 3] [--group 8] [k=v ...]   # k=v go to the RL run config, e.g. rollout.backend=hf_batched
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sft_gpu import build_model, profile_student  # noqa: E402  (the same models as the SFT bench)
from harness import Bench, main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def requests_of(
    prompts: Path, sft: Path, tokenizer: Any, n_prompts: int, group: int, cap: int, seed: int = 0
) -> list[tuple[list[int], int]]:
    """``(prompt ids, completion length)`` per request: ``n_prompts`` prompts x ``group``, each length
    drawn from the demo's assistant turns (their token counts, at most ``cap``)."""
    from coa.rollout.policy import Codec

    codec = Codec(tokenizer, [tokenizer.eos_token_id])
    rows = pq.read_table(prompts).slice(0, n_prompts).to_pylist()
    lengths = []
    for messages in pq.read_table(sft, columns=["messages"]).column("messages").to_pylist():
        content = next(m["content"] for m in messages if m["role"] == "assistant")
        lengths.append(min(cap, max(1, len(tokenizer(content, add_special_tokens=False)["input_ids"]))))
    rng = random.Random(seed)
    out = []
    for row in rows:
        system = next(m["content"] for m in row["prompt"] if m["role"] == "system")
        user = next(m["content"] for m in row["prompt"] if m["role"] == "user")
        ids = codec.chat_prompt_ids(system, user)
        out += [(ids, rng.choice(lengths)) for _ in range(group)]
    return out


def ours(model: Any, requests: list[tuple[list[int], int]]) -> int:
    """Every request through the project's continuous batcher at once; the tokens generated."""
    from coa.serve.engine import ContinuousBatcher, GenRequest

    batcher = ContinuousBatcher(model, max_batch=max(1, len(requests)), name="bench")
    left = threading.Semaphore(0)
    done: list[GenRequest] = []

    def finished(r: GenRequest) -> None:
        done.append(r)
        left.release()

    batcher.start()
    try:
        for ids, n in requests:
            batcher.submit(GenRequest(prompt=list(ids), max_tokens=n, temperature=1.0, done=finished))
        for _ in requests:
            left.acquire()
    finally:
        batcher.stop()
    if bad := [r.error for r in done if r.finish == "abort"]:
        raise RuntimeError(f"the batcher ended requests: {bad[:3]}")
    return sum(len(r.ids) for r in done)


def transformers_cb(model: Any, requests: list[tuple[list[int], int]]) -> int:
    """Every request through transformers' continuous batching manager; the tokens generated."""
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=-1,
                              max_new_tokens=max(n for _, n in requests))  # fmt: skip
    results = {}
    with model.continuous_batching_context_manager(
        generation_config=config, block=True, timeout=30
    ) as manager:
        ids = [manager.add_request(list(p), max_new_tokens=n, eos_token_id=-1) for p, n in requests]
        while len(results) < len(ids):
            result = manager.get_result(timeout=1)
            if result is not None and result.is_finished():
                if result.error:
                    raise RuntimeError(f"transformers' continuous batching: {result.error}")
                results[result.request_id] = len(result.generated_tokens)
            elif result is None and not manager.is_running():
                raise RuntimeError("transformers' continuous batching stopped before every request ended")
    return sum(results.values())


def plain_generate(model: Any, requests: list[tuple[list[int], int]], batch: int, pad: int) -> int:
    """``model.generate`` on left-padded batches (each to its longest request); the useful tokens."""
    import torch

    useful = 0
    for start in range(0, len(requests), batch):
        chunk = requests[start : start + batch]
        width = max(len(p) for p, _ in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p, _ in chunk], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in chunk], device=model.device)
        longest = max(n for _, n in chunk)
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
            do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad,
        )  # fmt: skip
        assert out.shape[1] == width + longest
        useful += sum(n for _, n in chunk)
    return useful


def rollouts(args: argparse.Namespace, bench: Bench, model_dir: Path) -> dict[str, Any]:
    """The three backends on the same model and requests: useful tokens/s each, ours ÷ each."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cuda = torch.cuda.is_available()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16 if cuda else torch.float32)
    model = model.to("cuda" if cuda else "cpu").eval()
    requests = requests_of(
        args.prompts, args.sft_data, tokenizer, args.n_prompts, args.group, args.max_new_tokens
    )
    tokens = sum(n for _, n in requests)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    backends: dict[str, Callable[[list[tuple[list[int], int]]], int]] = {
        "ours (hf_batched)": lambda r: ours(model, r),
        "transformers CB": lambda r: transformers_cb(model, r),
        "generate": lambda r: plain_generate(model, r, args.generate_batch, pad),
    }
    rates: dict[str, float | None] = {}
    for name, fn in backends.items():
        try:
            fn(requests[: max(2, len(requests) // 8)])  # warm-up: kernels, caches, allocator
            timing = bench.time(f"rollouts {name}", lambda fn=fn: fn(requests), repeat=1)
        except Exception as e:  # one backend failing still reports the others, and says why
            print(f"rollouts {name}: failed: {type(e).__name__}: {e}", flush=True)
            bench.figure(f"rollouts {name} error", f"{type(e).__name__}: {e}")
            rates[name] = None
            continue
        rates[name] = round(tokens / timing.best, 1)
    for name, rate in rates.items():
        if rate and name != "ours (hf_batched)" and rates["ours (hf_batched)"]:
            bench.ratio(f"rollout tokens/s ours / {name}", float(rates["ours (hf_batched)"] or 0), rate)
    report = {"requests": len(requests), "completion_tokens": tokens, "tokens_per_s": rates,
              "device": torch.cuda.get_device_name(0) if cuda else "cpu"}  # fmt: skip
    bench.figure("rollouts", report)
    return report


def launch(
    model: Path,
    prompts: Path,
    out: Path,
    steps: int,
    overrides: list[str],
    timeout: float | None = None,
    encyclopedia: Path | None = None,
) -> tuple[dict, float]:
    """The RL stage's entry point under accelerate; its ``rl_result.json`` and wall time. Past
    ``timeout`` seconds the whole process group is killed (the trainer runs in a child of the
    launcher) and :class:`TimeoutError` raised."""
    config = {
        "base_model": str(model), "prompts": str(prompts), "output_dir": str(out), "max_steps": steps,
        "learning_rate": 1e-6, "save_steps": 10_000, "logging_steps": 1, "prompts_per_step": 8,
        "group_size": 8, "max_total_tokens": 1024, "heldout_eval_steps": None,
        # a random-init student earns no reward: every group has zero variance, and dynamic sampling
        # would refill each batch (5x the episodes a step on CPU, 2026-11-27); the bench times one batch
        "max_refill_rounds": 0,
        # the pages the prompts' tasks were drawn from: what the rollouts' local search serves
        "encyclopedia": str(encyclopedia) if encyclopedia is not None else None,
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
    log = out / "launch.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )

        def stop(signum: int, frame: object) -> None:  # `timeout` ends this bench: its trainer too
            os.killpg(proc.pid, signal.SIGKILL)
            raise SystemExit(128 + signum)

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise TimeoutError(
                f"the RL run did not finish {steps} steps in {timeout:.0f} s (log: {log})"
            ) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
    wall = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{log.read_text()[-4000:]}")
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


def rl_step(args: argparse.Namespace, bench: Bench, model: Path) -> dict[str, Any]:
    """One RL run of ``--steps`` steps under accelerate; its split and rollout tokens/s."""
    import torch

    overrides = list(args.overrides)
    if args.quick:
        overrides = ["prompts_per_step=2", "group_size=2", "max_total_tokens=96", *overrides]
    try:
        result, wall = launch(
            model, args.prompts, args.out / "rl", args.steps, overrides, args.rl_timeout, args.encyclopedia
        )
    except (TimeoutError, RuntimeError) as e:  # the rollout figures above are still recorded
        print(f"rl step: {e}", flush=True)
        bench.figure("rl_step", {"error": str(e)[-2000:], "overrides": overrides})
        return {"error": str(e)[-2000:]}
    done = pq.read_table(result["rollouts_file"], columns=["completion_ids"])
    generated = int(pc.sum(pc.list_value_length(done.column("completion_ids"))).as_py() or 0)
    times = split(result)
    report = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "model": str(args.profile or args.model or model.name),
        "overrides": overrides,
        "steps": result["global_step"],
        "episodes": result["rollouts"],
        "completion_tokens": generated,
        "rollout_tokens_per_s": round(generated / max(times["generation_s"], 1e-9), 1),
        "optimizer_steps_per_s": round(result["global_step"] / max(times["total_s"], 1e-9), 4),
        "split": times,
        "split_share": {k: round(times[k] / max(times["total_s"], 1e-9), 3) for k in PARTS},
        "launch_wall_s": round(wall, 1),
    }
    bench.add_timing("rl step (training loop)", [times["total_s"] / max(1, int(result["global_step"]))])
    bench.figure("rl_step", report)
    return report


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:  # the CPU dry run: a tiny shape, a few short requests, one small step
        args.steps, args.n_prompts, args.group, args.max_new_tokens = 1, 2, 2, 16
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile is not None:
        model = args.model or profile_student(args.profile, args.sft_data, args.out)[0]
    else:
        model = args.model or build_model(args.sft_data, args.out, "tiny" if args.quick else args.shape)
    report: dict[str, Any] = {"rollouts": rollouts(args, bench, model)}
    print(json.dumps(report, indent=2), flush=True)
    if not args.rollouts_only:
        report["rl_step"] = rl_step(args, bench, model)
        print(json.dumps({"rl_step": report["rl_step"]}, indent=2), flush=True)
    (args.out / "bench_rl_gpu.json").write_text(json.dumps(report, indent=2))


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", type=Path, required=True, help="rl_prompt.v1 Parquet file")
    p.add_argument("--sft-data", type=Path, required=True, help="sft.v1 rows (tokenizer; completion lengths)")
    p.add_argument(
        "--encyclopedia",
        type=Path,
        help="document.v1 Parquet the RL step's local search serves (the synthetic step's encyclopedia "
        "table: gpu-prepare.sh writes .gpu/encyclopedia.parquet); without it RL must not search locally",
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=3, help="RL optimizer steps")
    p.add_argument("--shape", default="0.5b", choices=["0.5b", "1.5b", "tiny"], help="bench_sft_gpu's shapes")
    p.add_argument("--model", type=Path, help="an HF model folder instead of a shape")
    p.add_argument(
        "--profile", type=Path, help="a profile's random-init student (e.g. configs/demo-gpu.yaml)"
    )
    p.add_argument("--n-prompts", type=int, default=16, help="prompts in the rollout comparison")
    p.add_argument("--group", type=int, default=8, help="samples per prompt (the RL group)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="cap on a request's completion length")
    p.add_argument("--generate-batch", type=int, default=64, help="plain generate's batch")
    p.add_argument("--rollouts-only", action="store_true", help="skip the RL step")
    p.add_argument("--rl-timeout", type=float, default=None, help="seconds the RL run may take (then: error)")
    p.add_argument("overrides", nargs="*", help="k=v for the RL run config")


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
