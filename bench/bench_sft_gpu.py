"""SFT on one GPU: our SFT stage beside bare TRL ``SFTTrainer`` at its fastest, same examples and shape.

For each model shape (``--shapes``: the Qwen2.5-0.5B and -1.5B architectures, random init; nothing is
downloaded: the tokenizer is trained on the examples and the embedding padded to the real
151,936-token vocabulary, so the LM head costs what it costs in Qwen2.5) it runs, each in its own
``accelerate launch --config_file infra/accelerate/single_gpu.yaml`` process on the same ``sft.v1``
rows, ``--steps`` optimizer steps of

* **ours**: ``python -m coa.train.sft`` with the settings a user sets (``sft.*``): padding-free packing,
  bf16, ``attn_implementation`` (``--attn``), ``liger_kernel`` (``--liger``), no ZeRO, no activation
  checkpointing;
* **bare TRL**: ``SFTTrainer`` on the same encoded rows (``input_ids`` + ``labels``) with the settings
  TRL documents as its fastest: ``packing=True`` (BFD, padding-free), ``bf16``, its fused LM head,
  ``use_liger_kernel`` where Liger runs, the same attention kernel, the same batch and length;

and reports, per run, tokens/s (non-padding input tokens over the training loop's time), MFU
(6·N·tokens/s over the GPU's dense bf16 peak, read from the device name: ``bench/mfu.py``), seconds
per step and peak GPU memory, and the ratio ours ÷ bare TRL in tokens/s (below 1: ours is slower).

With ``--profile configs/demo-gpu.yaml`` it sizes that profile's SFT instead: the profile's own
student (``student.tiny``, left random), its ``sft`` settings on its ``sft.families``, one run of
``--steps`` steps, and the minutes its ``sft.max_steps`` and ``round_sft.max_steps`` would take.
``--quick`` is the CPU shapes of the GPU check on the CPU twin of the device (``infra/twin.py``,
``GPU_CHECK_CPU=1``, ``tests/infra/test_twin.py``): a tiny shape, 3 steps, short rows.

    python bench/bench_sft_gpu.py --data sft.parquet --out /tmp/bench [--shapes 0.5b,1.5b] [--steps 30]
    python bench/bench_sft_gpu.py --data sft.parquet --out /tmp/bench --profile configs/demo-gpu.yaml
    python bench/bench_sft_gpu.py --data sft.parquet --out /tmp/bench --quick --json record.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Bench, main  # noqa: E402
from mfu import mfu, peak_tflops  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHAPES: dict[str, dict[str, Any]] = {
    "0.5b": {  # Qwen2.5-0.5B
        "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "vocab_size": 151_936, "tie_word_embeddings": True,
    },
    "1.5b": {  # Qwen2.5-1.5B
        "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
        "num_key_value_heads": 2, "vocab_size": 151_936, "tie_word_embeddings": True,
    },
    "tiny": {  # --quick: the same code path on a CPU in seconds
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 4096, "tie_word_embeddings": True,
    },
}  # fmt: skip
QWEN25_05B = SHAPES["0.5b"]
ROPE_THETA = 1_000_000.0
BARE_TRL = "--bare-trl"  # this script, run under accelerate as bare TRL's worker: --bare-trl CONFIG.json


def build_model(data: Path, out: Path, shape: str = "0.5b") -> Path:
    """Tokenizer trained on the examples (CoA tags as tokens) + a random model of ``shape``, saved
    (reused when already there: the 1.5B shape takes a while to initialise on a CPU)."""
    folder = out / f"qwen2.5-{shape}-arch"
    if (folder / "params.json").exists():
        return folder
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from coa.model.tiny import IM_END, TinyModelConfig, sft_corpus, train_tokenizer

    tokenizer = train_tokenizer(sft_corpus(pq.read_table(data)), TinyModelConfig(vocab_size=4096))
    config = Qwen2Config(
        **SHAPES[shape],
        max_position_embeddings=32_768,
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_THETA},
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    (folder / "params.json").write_text(json.dumps({"parameters": params}))
    print(f"model: {shape}, {params / 1e6:.1f} M parameters -> {folder}", flush=True)
    return folder


def accelerate(args: list[str], out: Path) -> float:
    """``accelerate launch`` (one GPU, bf16 where there is one) of ``args``; its wall time."""
    accelerate_config = str(REPO / "infra" / "accelerate" / "single_gpu.yaml")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config, *args]
    if not _cuda():
        cmd[5:5] = ["--cpu", "--mixed_precision", "no"]
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    (out / "launch.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return wall


def launch(model: Path, data: Path, out: Path, steps: int, **overrides: object) -> dict[str, Any]:
    """Our SFT stage's entry point, ``steps`` steps; what its ``sft_result.json`` says."""
    config = {
        "base_model": str(model), "data": str(data), "output_dir": str(out), "max_steps": steps,
        "learning_rate": 1e-5, "warmup_steps": min(5, steps // 2), "batch_size": 8, "max_length": 2048,
        "logging_steps": 10, "save_steps": 10_000, "gradient_checkpointing": False, "heldout_fraction": 0.0,
        **overrides,
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    resolved = out / "resolved.yaml"
    resolved.write_text(yaml.safe_dump(config))
    wall = accelerate(["-m", "coa.train.sft", "--config", str(resolved)], out)
    result = json.loads((out / "sft_result.json").read_text())
    return {
        "config": {k: v for k, v in config.items() if k not in ("base_model", "data", "output_dir")},
        "steps": result["global_step"],
        "tokens_per_s": result["tokens_per_s"],
        "trained_tokens_per_s": round(result["trained_tokens"] / result["train_runtime_s"], 1),
        "s_per_step": round(result["train_runtime_s"] / result["global_step"], 4),
        "peak_gpu_memory_gib": result["peak_gpu_memory_gib"],
        "bf16": result["bf16"],
        "device": result["device"],
        "device_name": result.get("device_name"),
        "final_loss": result["final_loss"],
        "launch_wall_s": round(wall, 1),
    }


def launch_bare_trl(model: Path, data: Path, out: Path, steps: int, **settings: Any) -> dict[str, Any]:
    """Bare TRL's run (this script's :func:`bare_trl` under accelerate) on the same rows and model."""
    out.mkdir(parents=True, exist_ok=True)
    config = {"model": str(model), "data": str(data), "output_dir": str(out), "steps": steps, **settings}
    (out / "config.json").write_text(json.dumps(config))
    wall = accelerate([str(Path(__file__).resolve()), BARE_TRL, str(out / "config.json")], out)
    return {**json.loads((out / "result.json").read_text()), "launch_wall_s": round(wall, 1)}


def bare_trl(config_file: Path) -> None:
    """Bare TRL ``SFTTrainer`` at its documented fastest settings (run in its own process)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from coa.train.data import encode_examples
    from coa.train.kernels import liger_unavailable

    c = json.loads(config_file.read_text())
    cuda = torch.cuda.is_available()
    liger = c.get("liger", "auto") is not False and liger_unavailable(cuda) is None
    tokenizer = AutoTokenizer.from_pretrained(c["model"])
    encoded = encode_examples(pq.read_table(c["data"]), tokenizer, c["max_length"])
    args = SFTConfig(
        output_dir=str(Path(c["output_dir"]) / "checkpoints"), max_steps=c["steps"],
        per_device_train_batch_size=c["batch_size"], learning_rate=1e-5, warmup_steps=min(5, c["steps"] // 2),
        max_length=c["max_length"], packing=True, packing_strategy="bfd", bf16=cuda, use_cpu=not cuda,
        use_liger_kernel=liger, activation_checkpointing=False, save_strategy="no", report_to="none",
        logging_steps=10, include_num_input_tokens_seen="non_padding", disable_tqdm=True,
        dataloader_num_workers=0, model_init_kwargs=None,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(
        c["model"], dtype=torch.float32, attn_implementation=c["attn_implementation"]
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict(encoded.as_columns()),
        processing_class=tokenizer,
    )
    out = trainer.train()
    runtime = float(out.metrics["train_runtime"])
    tokens = int(trainer.state.num_input_tokens_seen)
    result = {
        "config": {k: v for k, v in c.items() if k not in ("model", "data", "output_dir")} | {"liger": liger},
        "steps": trainer.state.global_step,
        "tokens_per_s": round(tokens / runtime, 1),
        "s_per_step": round(runtime / max(1, trainer.state.global_step), 4),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3) if cuda else None,
        "final_loss": float(out.training_loss),
    }
    (Path(c["output_dir"]) / "result.json").write_text(json.dumps(result))


def plain_if_liger_fails(
    label: str, start: Callable[[bool | str], dict[str, Any]], liger: bool | str, cuda: bool
) -> dict[str, Any]:
    """``start(liger)``; where Liger's kernels would run and the run fails, once more on the plain path
    (``liger=False``) with one warning line naming what failed: a GPU-only kernel failure costs the
    Liger figure, not the part. The run's ``path`` says which path its figures come from."""
    from coa.train.kernels import liger_unavailable

    if liger is False or liger_unavailable(cuda) is not None:
        return {**start(False if liger is False else liger), "path": "plain"}
    try:
        return {**start(liger), "path": "liger"}
    except SystemExit as e:
        failed = " ".join(str(e).strip().splitlines()[-1:])[-300:]
        print(
            f"warning: {label}: the run with Liger's kernels failed ({failed}); rerunning on the plain path",
            flush=True,
        )
        return {**start(False), "path": f"plain (Liger failed: {failed})"}


def compare(bench: Bench, args: argparse.Namespace, shape: str) -> dict[str, Any]:
    """Ours and bare TRL on ``shape``: both runs, MFU, and the ratio, recorded in ``bench``."""
    out = args.out / shape
    model = build_model(args.data, args.out, shape)
    parameters = int(json.loads((model / "params.json").read_text())["parameters"])
    settings = {
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "attn_implementation": args.attn,
    }
    liger: bool | str = {"true": True, "false": False}.get(args.liger, "auto")
    runs: dict[str, dict[str, Any]] = {}
    starts: dict[str, Callable[[bool | str], dict[str, Any]]] = {
        "ours": lambda use: launch(
            model, args.data, out / "ours", args.steps, packing=True, liger_kernel=use, **settings
        ),
        "bare TRL": lambda use: launch_bare_trl(
            model, args.data, out / "bare-trl", args.steps, liger=use, **settings
        ),
    }
    for name, start in starts.items():
        try:
            runs[name] = plain_if_liger_fails(f"{shape} {name}", start, liger, _cuda())
        except SystemExit as e:  # one run failing still reports the other, and says why
            print(f"{shape} {name}: {e}", flush=True)
            runs[name] = {"error": str(e)[-2000:]}
        bench.figure(
            shape, {"parameters": parameters, **{k.replace(" ", "_").lower(): v for k, v in runs.items()}}
        )
    ours, trl = runs["ours"], runs["bare TRL"]
    peak = peak_tflops(str(ours.get("device_name") or "") or _device_name())
    for name, run in runs.items():
        if "error" not in run:
            run["mfu"] = round(mfu(float(run["tokens_per_s"]), parameters, peak), 4) if peak else None
            bench.add_timing(f"{shape} {name} s/step", [float(run["s_per_step"])])
    ratio = None
    if "error" not in ours and "error" not in trl:
        ratio = bench.ratio(
            f"{shape} ours / bare TRL (tokens/s)", float(ours["tokens_per_s"]), float(trl["tokens_per_s"])
        )
    sweep: dict[int, dict[str, Any]] = {}
    for batch in sorted({int(b) for b in args.batch_sizes.split(",") if b} - {args.batch_size}):
        try:  # the micro-batch the memory allows, measured: a run out of memory says so
            sized = {**settings, "batch_size": batch}
            run = launch(
                model,
                args.data,
                out / f"ours-b{batch}",
                args.steps,
                packing=True,
                liger_kernel=liger,
                **sized,
            )
            run["mfu"] = round(mfu(float(run["tokens_per_s"]), parameters, peak), 4) if peak else None
            sweep[batch] = {k: run[k] for k in ("tokens_per_s", "s_per_step", "peak_gpu_memory_gib", "mfu")}
        except SystemExit as e:
            sweep[batch] = {"error": "out of memory" if "OutOfMemory" in str(e) else str(e)[-500:]}
    report = {
        "parameters": parameters,
        "peak_tflops": peak,
        "ours": ours,
        "bare_trl": trl,
        "ours_over_trl": ratio,
        "ours_by_batch_size": sweep,
    }
    bench.figure(shape, report)
    print(json.dumps({shape: report}, indent=2), flush=True)
    return report


def run(args: argparse.Namespace, bench: Bench) -> None:
    if args.quick:  # the CPU dry run: the same code path, a tiny shape
        args.shapes, args.steps, args.max_length, args.batch_size = "tiny", 3, 256, 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.profile is not None:
        report = profile_run(args.profile, args.data, args.out, args.steps)
        run_ = report["run"]
        peak = peak_tflops(str(run_.get("device_name") or ""))
        parameters = int(report["student_parameters"])
        run_["mfu"] = round(mfu(float(run_["tokens_per_s"]), parameters, peak), 4) if peak else None
        bench.add_timing("profile s/step", [float(run_["s_per_step"])])
        bench.figure("profile", report)
        (args.out / "bench_sft_gpu_profile.json").write_text(json.dumps(report, indent=2))
        print(json.dumps(report, indent=2))
        return
    reports = {shape: compare(bench, args, shape) for shape in args.shapes.split(",")}
    (args.out / "bench_sft_gpu.json").write_text(json.dumps(reports, indent=2))


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="sft.v1 Parquet file")
    p.add_argument("--out", type=Path, required=True, help="models, runs and bench_sft_gpu.json go here")
    p.add_argument("--shapes", default="0.5b,1.5b", help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=4, help="packed rows per micro-batch (both runs)")
    p.add_argument(
        "--batch-sizes", default="", help="also run ours at these micro-batches (e.g. 8,16): tokens/s, memory"
    )
    p.add_argument("--max-length", type=int, default=2048, help="tokens per packed row (both runs)")
    p.add_argument("--attn", default="sdpa", choices=["sdpa", "eager", "flash_attention_2", "flex_attention"])
    p.add_argument("--liger", default="auto", choices=["auto", "true", "false"], help="sft.liger_kernel")
    p.add_argument("--profile", type=Path, help="size this profile's student SFT instead (see above)")


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


PROFILE_SFT = "profile-sft.parquet"  # the examples the profile's student trains on, beside it


def profile_student(profile: Path, data: Path, out: Path) -> tuple[Path, pa.Table, dict]:
    """The profile's student (``student.tiny``, tokenizer trained on its ``sft.families`` examples),
    left random: its folder, the examples it trains on (also written to ``out``), and the profile's
    merged layers.

    The profile's ``pretrain_steps`` are not run: the benches time steps, which the weights do not
    change, and the GPU demo's 4,000 pretraining steps (~130 s on an H200) alone outlasted the
    ``profile`` and ``profile-rl`` parts' 120 s in ``infra/gpu-check.sh`` (no figure, 2026-11-27/28)."""
    import pyarrow.compute as pc

    from coa.config import load_yaml_layers
    from coa.model.tiny import TinyModelConfig, init_model, sft_corpus

    layers = load_yaml_layers(profile)
    families = (layers.get("sft") or {}).get("families")
    table = pq.read_table(data)
    if families:
        table = table.filter(pc.is_in(table.column("family"), pa.array(list(families))))
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / PROFILE_SFT)
    student = TinyModelConfig(**{**(layers.get("student") or {}).get("tiny", {}), "pretrain_steps": 0})
    return init_model(sft_corpus(table), student, out / "profile-student"), table, layers


def profile_run(profile: Path, data: Path, out: Path, steps: int) -> dict[str, Any]:
    """The profile's student and SFT settings, ``steps`` steps; the profile's step counts priced."""
    from coa.model.tiny import MODEL_CARD
    from coa.train.config import SFTStageConfig

    model, table, layers = profile_student(profile, data, out)
    sft = dict(layers.get("sft") or {})
    selected = out / PROFILE_SFT
    parameters = json.loads((model / MODEL_CARD).read_text())["n_params"]
    unplanned = ("max_steps", "save_steps")
    params = {k: v for k, v in sft.items() if k in SFTStageConfig.model_fields and k not in unplanned}
    params.update(warmup_steps=min(int(params.get("warmup_steps", 0)), steps // 10))
    result = launch(model, selected, out / "profile", steps, **params)
    s_per_step = float(result["s_per_step"])  # type: ignore[arg-type]
    planned = {
        "sft": int(sft.get("max_steps") or 0),
        "round_sft": int(((layers.get("round_sft") or {}).get("max_steps")) or 0),
    }
    return {
        "profile": str(profile),
        "examples": table.num_rows,
        "families": sft.get("families"),
        "student_parameters": parameters,
        "run": result,
        "planned_minutes": {k: round(v * s_per_step / 60, 1) for k, v in planned.items()},
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == BARE_TRL:
        bare_trl(Path(sys.argv[2]))
    else:
        main(run, __doc__, extra=arguments)
