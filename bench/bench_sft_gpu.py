"""SFT throughput and memory of a real-architecture model on one GPU, through the worker's code path.

Builds a random-init model with the Qwen2.5-0.5B architecture (hidden 896, 24 layers, 14 heads,
2 KV heads, MLP 4864, vocabulary 151,936, tied embeddings; nothing is downloaded: the tokenizer is
trained on the examples and the embedding padded to the real vocabulary, so the LM head costs what
it costs in Qwen2.5), then runs ``accelerate launch --config_file infra/accelerate/single_gpu.yaml
-m coa.train.sft --config resolved.yaml`` twice on the same ``sft.v1`` examples: padded batches
(the baseline) and padding-free packing. It reports tokens/s, seconds per step and peak GPU
memory of each, and packing's speed as a ratio of the baseline measured in the same command.

With ``--profile configs/demo-gpu.yaml`` it sizes that profile's SFT instead: the profile's own
student (``student.tiny``, tokenizer trained on the examples), its ``sft`` settings (batch,
length, learning rate, packing, precision) on its ``sft.families``, one run of ``--steps`` steps,
and the minutes its ``sft.max_steps`` and ``round_sft.max_steps`` would take at the measured rate.

    python bench/bench_sft_gpu.py --data sft.parquet --out /tmp/bench [--steps 60]
    python bench/bench_sft_gpu.py --data sft.parquet --out /tmp/bench \\
        --profile configs/demo-gpu.yaml --steps 300
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parents[1]
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151_936,
    "max_position_embeddings": 32_768,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": True,
}


def build_model(data: Path, out: Path) -> Path:
    """Tokenizer trained on the examples (CoA tags as tokens) + random Qwen2.5-0.5B-shaped model."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from coa.model.tiny import IM_END, TinyModelConfig, sft_corpus, train_tokenizer

    tokenizer = train_tokenizer(sft_corpus(pq.read_table(data)), TinyModelConfig(vocab_size=4096))
    arch = dict(QWEN25_05B)
    rope_theta = arch.pop("rope_theta")
    config = Qwen2Config(
        **arch,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    folder = out / "qwen2.5-0.5b-arch"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    (folder / "params.json").write_text(json.dumps({"parameters": params}))
    print(f"model: {params / 1e6:.1f} M parameters -> {folder}", flush=True)
    return folder


def mfu(tokens_per_s: float, parameters: int, peak_tflops: float) -> float:
    """Model FLOPs utilisation: 6 FLOPs per parameter per token (forward + backward; attention's
    quadratic term left out, as PaLM's appendix B does for short sequences) over the GPU's peak."""
    return 6.0 * parameters * tokens_per_s / (peak_tflops * 1e12)


def launch(model: Path, data: Path, out: Path, steps: int, **overrides: object) -> dict[str, object]:
    config = {
        "base_model": str(model), "data": str(data), "output_dir": str(out), "max_steps": steps,
        "learning_rate": 1e-5, "warmup_steps": 5, "batch_size": 8, "max_length": 2048, "logging_steps": 10,
        "save_steps": 10_000, "gradient_checkpointing": False, **overrides,
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    resolved = out / "resolved.yaml"
    resolved.write_text(yaml.safe_dump(config))
    accelerate_config = str(REPO / "infra" / "accelerate" / "single_gpu.yaml")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config,
           "-m", "coa.train.sft", "--config", str(resolved)]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
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
        "final_loss": result["final_loss"],
        "launch_wall_s": round(wall, 1),
    }


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


def profile_run(profile: Path, data: Path, out: Path, steps: int) -> dict[str, object]:
    """The profile's student and SFT settings, ``steps`` steps; the profile's step counts priced."""
    from coa.model.tiny import MODEL_CARD
    from coa.train.config import SFTParams

    model, table, layers = profile_student(profile, data, out)
    sft = dict(layers.get("sft") or {})
    families = sft.get("families")
    selected = out / PROFILE_SFT
    parameters = json.loads((model / MODEL_CARD).read_text())["n_params"]
    unplanned = ("max_steps", "save_steps")
    params = {k: v for k, v in sft.items() if k in SFTParams.model_fields and k not in unplanned}
    params.update(warmup_steps=min(int(params.get("warmup_steps", 0)), steps // 10))
    run = launch(model, selected, out / "profile", steps, **params)
    s_per_step = float(run["s_per_step"])  # type: ignore[arg-type]
    planned = {
        "sft": int(sft.get("max_steps") or 0),
        "round_sft": int(((layers.get("round_sft") or {}).get("max_steps")) or 0),
    }
    return {
        "profile": str(profile),
        "examples": table.num_rows,
        "families": families,
        "student_parameters": parameters,
        "run": run,
        "planned_minutes": {k: round(v * s_per_step / 60, 1) for k, v in planned.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="sft.v1 Parquet file")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=989.0,
        help="the GPU's dense bf16 peak for MFU (H100 SXM: 989; H200: 989; the measured 8192^3 matmul: ~790)",
    )
    parser.add_argument("--profile", type=Path, help="size this profile's student SFT instead (see above)")
    ns = parser.parse_args()
    import torch

    if ns.profile is not None:
        report = profile_run(ns.profile, ns.data, ns.out, ns.steps)
        run = report["run"]
        assert isinstance(run, dict)
        parameters = int(report["student_parameters"])  # type: ignore[call-overload]
        run["mfu"] = round(mfu(float(run["tokens_per_s"]), parameters, ns.peak_tflops), 4)
        report["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        (ns.out / "bench_sft_gpu_profile.json").write_text(json.dumps(report, indent=2))
        print(json.dumps(report, indent=2))
        return
    model = build_model(ns.data, ns.out)
    padded = launch(model, ns.data, ns.out / "padded", ns.steps)
    print(json.dumps({"padded": padded}), flush=True)
    packed = launch(model, ns.data, ns.out / "packed", ns.steps, packing=True, batch_size=4)
    print(json.dumps({"packed": packed}), flush=True)
    parameters = json.loads((model / "params.json").read_text())["parameters"]
    for run in (padded, packed):
        run["mfu"] = round(mfu(float(run["tokens_per_s"]), parameters, ns.peak_tflops), 4)  # type: ignore[arg-type]
    report = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "parameters": parameters,
        "peak_tflops": ns.peak_tflops,
        "torch": torch.__version__,
        "examples": pq.read_metadata(ns.data).num_rows,
        "padded": padded,
        "packed": packed,
        "packed_vs_padded_tokens_per_s": round(
            float(packed["tokens_per_s"]) / float(padded["tokens_per_s"]), 3
        ),  # type: ignore[arg-type]
    }
    (ns.out / "bench_sft_gpu.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
