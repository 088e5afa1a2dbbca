"""The SFT step: fine-tune a model on the ``sft`` table of a convert artifact into a ``model`` artifact.

The artifact holds ``model/`` (weights and tokenizer), ``loss_curve.png`` and ``sft_result.json``;
its lineage names the base model, the dataset (upstream content hash), the resolved config and the
steps planned and run.

**Where training runs.** ``launcher: auto`` trains in this process on a CPU and launches
``accelerate launch --config_file <accelerate_config> -m coa.train.sft --config resolved.yaml`` when
a CUDA GPU is present, so one GPU and a multi-GPU node (DDP, FSDP2, ZeRO-3: ``num_processes``) run
the same code path; ``launcher: torchrun`` starts ``num_processes`` ranks with torchrun instead. Checkpoints
go to ``{root}/checkpoints/model/<name>-<key>`` (local roots; remote roots checkpoint under
``~/.cache/coa``); a rerun after a crash or a kill resumes from the last one and the folder is
removed once the artifact is committed.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Any

from coa import io
from coa.kit.launch import launch, resolve_launcher, work_dir
from coa.steps import Build, Stage, Step, StepInput
from coa.train.config import SFT, SFTResult, SFTRunConfig, SFTStageConfig
from coa.train.data import select_examples
from coa.train.summary import SFTSummary

SFT_TABLE = "sft"
MODEL_FOLDER = "model"
RESULT_FILE = SFT.result_file
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
    options = {"callbacks": tuple(callbacks)} if callbacks else {}
    return STAGE.step(config, {"base": base, "data": converted}, name=name, options=options)


def _build(b: Build) -> None:
    config: SFTStageConfig = b.step.config
    callbacks: Sequence[Any] = b.step.options.get("callbacks", ())
    base, data = b.model("base"), b.table("data")
    out = work_dir(b.store.root, b.writer.uri)
    examples = select_examples(data.read(), config.families)
    params = config.model_dump()
    run_config = SFTRunConfig(**params, base_model=base.local_path(), output_dir=str(out))
    if resolve_launcher(config) == "in_process":
        from coa.kit.callbacks import progress_callback
        from coa.train.sft import run_sft

        progress = [progress_callback(b.progress)] if b.progress is not None else []
        result = run_sft(examples, run_config, out, resume=True, callbacks=[*callbacks, *progress])
    else:
        launched = launch(SFT, examples, run_config, out, config, b.progress)
        result = SFTResult.model_validate(launched)
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
    b.report(
        SFTSummary(
            steps_planned=result.steps_planned,
            steps_run=result.global_step,
            final_loss=result.final_loss,
            tokens_seen=result.tokens_seen,
            tokens_per_s=result.tokens_per_s,
            device=result.device,
            heldout_loss=result.heldout_loss_curve[-1][1] if result.heldout_loss_curve else None,
            n_heldout=result.n_heldout,
            overfit_warning=result.overfit_warning,
            loss_curve=tuple((s, v) for s, v in result.loss_curve[:: max(1, len(result.loss_curve) // 50)]),
        )
    )
    b.cleanup.append(lambda: shutil.rmtree(out, ignore_errors=True))


STAGE = Stage(
    name="sft",
    kind="model",
    build=_build,
    config=SFTStageConfig,
    expects={"data": "sft.v1"},
    summary=SFTSummary,
    describe="supervised fine-tuning (observations masked)",
    runs_model=True,
)


def read_result(ref: Any) -> SFTResult:
    """The :class:`SFTResult` of a committed SFT artifact."""
    return SFTResult.model_validate_json(io.read_file(ref, RESULT_FILE))
