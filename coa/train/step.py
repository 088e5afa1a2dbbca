"""The SFT step: fine-tune a model on the ``sft`` table of a convert artifact into a ``model`` artifact.

The artifact holds ``model/`` (weights and tokenizer), ``loss_curve.png`` and ``sft_result.json``;
its lineage names the base model, the dataset (upstream content hash), the resolved config and the
steps planned and run.

**Where training runs.** ``launcher: auto`` trains in this process on a CPU and launches
``accelerate launch --config_file <accelerate_config> -m coa.train.sft --config resolved.yaml`` when
a CUDA GPU is present, so one GPU and a multi-GPU ZeRO-3 node run the same code path. Checkpoints
go to ``{root}/checkpoints/model/<name>-<key>`` (local roots; remote roots checkpoint under
``~/.cache/coa``); a rerun after a crash or a kill resumes from the last one and the folder is
removed once the artifact is committed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from coa.steps import Build, Step, StepInput
from coa.train.config import SFTError, SFTParams, SFTResult, SFTRunConfig, SFTStageConfig

SFT_TABLE = "sft"
MODEL_FOLDER = "model"
RESULT_FILE = "sft_result.json"
LOSS_PNG = "loss_curve.png"


def step(
    config: SFTStageConfig,
    base: StepInput,
    converted: StepInput,
    name: str = "sft",
    callbacks: Sequence[Any] = (),
) -> Step:
    """Fine-tune ``base`` (a model input) on the ``sft`` examples of ``converted``.

    ``callbacks`` (transformers ``TrainerCallback``s, e.g. progress logging) do not change the
    artifact's identity.
    """
    return Step(
        name=name,
        builder="sft",
        kind="model",
        artifact=config.name,
        config=config,
        build=lambda b: _build(b, callbacks),
        inputs={"base": base, "data": converted},
        describe="supervised fine-tuning (observations masked)",
        expects={"data": "sft.v1"},
    )


def select_examples(examples: pa.Table, families: Sequence[str] | None) -> pa.Table:
    """The rows of the configured families (all when ``families`` is None); none left is an error."""
    if families is None:
        return examples
    chosen = examples.filter(pc.is_in(examples["family"], pa.array(list(families))))
    if chosen.num_rows == 0:
        present = sorted(set(examples.column("family").to_pylist()))
        raise SFTError(f"no SFT example of families {list(families)}; the data holds {present}")
    return chosen


def resolve_launcher(config: Any) -> Literal["in_process", "accelerate"]:
    """Where a training stage (SFT, RL) runs: its ``launcher``, or by the hardware when ``auto``."""
    if config.launcher != "auto":
        return config.launcher
    import torch

    return "accelerate" if torch.cuda.is_available() else "in_process"


def work_dir(store_root: str, artifact_uri: str) -> Path:
    """The checkpoint folder of an SFT artifact in progress (stable across reruns)."""
    from coa import io

    if "://" not in store_root:
        return Path(io.Store(store_root).checkpoint_uri(artifact_uri))
    cache = Path(os.environ.get("COA_CACHE_DIR", Path.home() / ".cache" / "coa"))
    return cache / "checkpoints" / "/".join(artifact_uri.rstrip("/").split("/")[-2:])


def _build(b: Build, callbacks: Sequence[Any]) -> None:
    config: SFTStageConfig = b.step.config
    base, data = b.model("base"), b.table("data")
    out = work_dir(b.store.root, b.writer.uri)
    examples = select_examples(data.read(), config.families)
    params = config.model_dump(include=set(SFTParams.model_fields))
    run_config = SFTRunConfig(**params, base_model=base.local_path(), output_dir=str(out))
    if resolve_launcher(config) == "in_process":
        from coa.train.sft import run_sft

        progress = [progress_callback(b.progress)] if b.progress is not None else []
        result = run_sft(examples, run_config, out, resume=True, callbacks=[*callbacks, *progress])
    else:
        result = launch_accelerate(examples, run_config, out, config.accelerate_config, config.num_processes)
    b.writer.put_folder(MODEL_FOLDER, result.model_dir)
    b.writer.put_file(LOSS_PNG, result.loss_curve_png)
    b.writer.write_file(RESULT_FILE, result.model_dump_json(indent=2))
    b.writer.extra_lineage.update(
        {
            "base_model": base.name,
            "dataset": {
                "uri": data.uri,
                "content_hash": data.ref.content_hash,
                "examples": examples.num_rows,
            },
            "steps_planned": result.steps_planned,
            "steps_run": result.global_step,
            "tokens_seen": result.tokens_seen,
        }
    )
    b.summary.update(
        steps_planned=result.steps_planned,
        steps_run=result.global_step,
        final_loss=result.final_loss,
        tokens_seen=result.tokens_seen,
        tokens_per_s=result.tokens_per_s,
        device=result.device,
        heldout_loss=result.heldout_loss_curve[-1][1] if result.heldout_loss_curve else None,
        n_heldout=result.n_heldout,
        overfit_warning=result.overfit_warning,
        loss_curve=[[s, v] for s, v in result.loss_curve[:: max(1, len(result.loss_curve) // 50)]],
    )
    b.cleanup.append(lambda: shutil.rmtree(out, ignore_errors=True))


def progress_callback(report: Any) -> Any:
    """A ``TrainerCallback`` that reports ``(optimizer step, planned steps)`` after every step (the
    Prefect layer logs it in tenths; the CLI draws a bar)."""
    from transformers import TrainerCallback

    class _Progress(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.is_world_process_zero:
                report(int(state.global_step), int(state.max_steps))

    return _Progress()


def read_result(ref: Any) -> SFTResult:
    """The :class:`SFTResult` of a committed SFT artifact."""
    from coa import io

    return SFTResult.model_validate_json(io.read_file(ref, RESULT_FILE))


def launch_accelerate(
    examples: pa.Table,
    config: SFTRunConfig,
    out: Path,
    accelerate_config: str,
    num_processes: int | None = None,
) -> SFTResult:
    """Run ``accelerate launch -m coa.train.sft`` on ``examples``; its ``sft_result.json`` is the result."""
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    data = out / "examples.parquet"
    if not data.exists():
        pq.write_table(examples, data.with_suffix(".tmp"))
        data.with_suffix(".tmp").replace(data)
    resolved = out / "resolved.yaml"
    resolved.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=True))
    if not Path(accelerate_config).is_file():
        raise SFTError(
            f"accelerate config {accelerate_config} not found (paths are relative to the repo root)"
        )
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config]
    if num_processes is not None:
        cmd += ["--num_processes", str(num_processes)]
    cmd += ["-m", "coa.train.sft", "--config", str(resolved), "--data", str(data), "--output-dir", str(out)]
    cmd.append("--resume")
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        raise SFTError(f"`{' '.join(cmd)}` exited with {proc.returncode}; its log is above")
    return SFTResult.model_validate(json.loads((out / RESULT_FILE).read_text()))
