"""The pipeline's student and SFT stages: a base model, then a fine-tuned one, both as artifacts.

* :class:`StudentConfig` / :func:`run_student_stage`: the model to fine-tune. A given folder or hub
  id is used as is; otherwise ``coa model init`` builds the tiny student (tokenizer trained on the
  SFT texts) into a content-addressed ``model/<name>`` artifact.
* :class:`SFTStageConfig` / :func:`run_sft_stage`: fine-tune on the ``sft`` table of a convert
  artifact into ``model/<name>`` holding ``model/`` (weights and tokenizer), ``loss_curve.png`` and
  ``sft_result.json``. Its lineage names the base model, the dataset (upstream content hash), the
  resolved config and the steps planned and run.

**Where training runs.** ``launcher: auto`` trains in this process on a CPU and launches
``accelerate launch --config_file <accelerate_config> -m coa.train.sft --config resolved.yaml`` when
a CUDA GPU is present, so one GPU and a multi-GPU ZeRO-3 node run the same code path. Checkpoints
go to ``{root}/checkpoints/model/<name>-<key>`` (local roots; remote roots checkpoint under
``~/.cache/coa``); a rerun after a crash or a kill resumes from the last one and the folder is
removed once the artifact is committed.
"""

from __future__ import annotations

import dataclasses
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
from pydantic import Field

from coa.config import StrictModel
from coa.model.tiny import TinyModelConfig
from coa.train.config import SFTError, SFTParams, SFTResult, SFTRunConfig

SFT_TABLE = "sft"
MODEL_FOLDER = "model"
RESULT_FILE = "sft_result.json"
LOSS_PNG = "loss_curve.png"


class StudentConfig(StrictModel):
    """The model the SFT stage starts from."""

    name: str = Field(default="student", description="Artifact name of a built tiny model.")
    base: str | None = Field(
        default=None,
        description="A Hugging Face model folder or hub id to fine-tune (e.g. Qwen/Qwen2.5-7B-Instruct on "
        "a GPU worker); null = build the tiny student on the SFT data (`coa model init`).",
    )
    tiny: TinyModelConfig = Field(
        default_factory=TinyModelConfig, description="Size of the tiny student built when base is null."
    )


class SFTStageConfig(SFTParams):
    """The SFT stage: training settings plus where and on which examples it runs."""

    name: str = Field(default="sft", description="Artifact name of the fine-tuned model.")
    families: tuple[str, ...] | None = Field(
        default=None, description="Train only on examples of these task families; null = all."
    )
    launcher: Literal["auto", "in_process", "accelerate"] = Field(
        default="auto",
        description="auto = in this process on CPU, `accelerate launch` when a CUDA GPU is present.",
    )
    accelerate_config: str = Field(
        default="infra/accelerate/single_gpu.yaml",
        description="accelerate config for the launched run (multi_gpu_zero3.yaml for DeepSpeed ZeRO-3).",
    )
    num_processes: int | None = Field(
        default=None, ge=1, description="Override of the accelerate config's process count (GPUs)."
    )


@dataclasses.dataclass(frozen=True)
class StudentModel:
    """A model to load: a local folder or hub id, and its artifact when the pipeline built it."""

    path: str
    ref: Any = None


def run_student_stage(config: StudentConfig, converted: Any, store: Any) -> StudentModel:
    """The base model: ``config.base`` as given, or the tiny student built on the SFT texts."""
    from coa import io
    from coa.model.tiny import init_model_artifact, sft_corpus

    if config.base is not None:
        return StudentModel(config.base)
    examples = io.read_table(converted, SFT_TABLE)
    ref = init_model_artifact(
        config.tiny, sft_corpus(examples), store, name=config.name, upstream=[converted]
    )
    return StudentModel(str(io.local_folder(ref, MODEL_FOLDER, store.settings)), ref)


def select_examples(examples: pa.Table, families: Sequence[str] | None) -> pa.Table:
    """The rows of the configured families (all when ``families`` is None); none left is an error."""
    if families is None:
        return examples
    chosen = examples.filter(pc.is_in(examples["family"], pa.array(list(families))))
    if chosen.num_rows == 0:
        present = sorted(set(examples.column("family").to_pylist()))
        raise SFTError(f"no SFT example of families {list(families)}; the data holds {present}")
    return chosen


def resolve_launcher(config: SFTStageConfig) -> Literal["in_process", "accelerate"]:
    if config.launcher != "auto":
        return config.launcher
    import torch

    return "accelerate" if torch.cuda.is_available() else "in_process"


def work_dir(store: Any, artifact_uri: str) -> Path:
    """The checkpoint folder of an SFT artifact in progress (stable across reruns)."""
    from coa.collect import checkpoint_uri

    if "://" not in store.root:
        return Path(checkpoint_uri(store.root, artifact_uri))
    cache = Path(os.environ.get("COA_CACHE_DIR", Path.home() / ".cache" / "coa"))
    return cache / "checkpoints" / "/".join(artifact_uri.rstrip("/").split("/")[-2:])


def run_sft_stage(
    config: SFTStageConfig,
    base: StudentModel,
    converted: Any,
    store: Any,
    callbacks: Sequence[Any] = (),
) -> tuple[Any, SFTResult]:
    """Fine-tune ``base`` on the converted examples into a committed ``model/<name>`` artifact.

    Reused when committed; resumed from its checkpoints after a crash. Raises
    :class:`~coa.train.config.StepCountError` (nothing committed) when the plan was not followed.
    """
    from coa import io

    upstream = [converted] + ([base.ref] if base.ref is not None else [])
    identity = {"sft": config.model_dump(mode="json"), "base_model": None if base.ref else base.path}
    writer = store.writer("model", config.name, identity, upstream=upstream)
    existing = writer.existing()
    if existing is not None:
        return existing, SFTResult.model_validate_json(io.read_file(existing, RESULT_FILE))
    out = work_dir(store, writer.uri)
    examples = select_examples(io.read_table(converted, SFT_TABLE), config.families)
    params = config.model_dump(include=set(SFTParams.model_fields))
    run_config = SFTRunConfig(**params, base_model=base.path, output_dir=str(out))
    if resolve_launcher(config) == "in_process":
        from coa.train.sft import run_sft

        result = run_sft(examples, run_config, out, resume=True, callbacks=callbacks)
    else:
        result = launch_accelerate(examples, run_config, out, config.accelerate_config, config.num_processes)
    writer.put_folder(MODEL_FOLDER, result.model_dir)
    writer.put_file(LOSS_PNG, result.loss_curve_png)
    writer.write_file(RESULT_FILE, result.model_dump_json(indent=2))
    writer.extra_lineage.update(
        {
            "base_model": base.path if base.ref is None else base.ref.uri,
            "dataset": {
                "uri": converted.uri,
                "content_hash": converted.content_hash,
                "examples": examples.num_rows,
            },
            "steps_planned": result.steps_planned,
            "steps_run": result.global_step,
            "tokens_seen": result.tokens_seen,
        }
    )
    ref = writer.commit()
    shutil.rmtree(out, ignore_errors=True)
    return ref, result


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
