"""The student step: the tiny student built on the SFT texts, as a ``model`` artifact.

The artifact holds the model files under ``model/`` (weights, tokenizer, ChatML template,
``coa_model.json``); its key hashes the tiny config and the converted data the tokenizer was trained
on, so the same inputs give the same model. A configured ``student.base`` (a folder or hub id) needs
no step: the plan passes it on as an external :class:`~coa.steps.ModelInput`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from pydantic import Field

from coa.model.config import StudentConfig
from coa.model.tiny import MODEL_CARD, TinyModelConfig, init_model, sft_corpus
from coa.steps import Build, Stage, Step, StepInput, StepSummary

MODEL_FOLDER = "model"


class StudentSummary(StepSummary):
    """What the student step built the tiny student's tokenizer on."""

    examples: int = Field(description="SFT examples whose texts trained the tokenizer.")
    pretrain_steps: int = Field(default=0, description="Causal-LM steps on those texts (0: left random).")
    pretrain_loss_first: float | None = Field(default=None, description="Loss of the first pretraining step.")
    pretrain_loss_last: float | None = Field(default=None, description="Loss of the last pretraining step.")


def step(config: StudentConfig, converted: StepInput, name: str = "student") -> Step:
    """Build the tiny student (``config.tiny``) with a tokenizer trained on ``converted``'s SFT texts."""
    if config.base is not None:
        raise ValueError(f"student.base is {config.base!r}: there is nothing to build")
    steps = config.tiny.pretrain_steps
    described = STAGE.describe + (f", pretrained {steps} steps on it" if steps else "")
    return STAGE.step(config.tiny, {"data": converted}, name=name, artifact=config.name, describe=described)


def _build(b: Build) -> None:
    examples = b.table("data").read()
    with tempfile.TemporaryDirectory(prefix="coa-model-init-") as tmp:
        init_model(sft_corpus(examples), b.step.config, tmp, b.progress)
        card = json.loads((Path(tmp) / MODEL_CARD).read_text())
        for path in sorted(Path(tmp).iterdir()):
            b.writer.write_file(f"{MODEL_FOLDER}/{path.name}", path.read_bytes())
    loss = card["pretrain_loss"] or {}
    b.report(
        StudentSummary(
            examples=examples.num_rows,
            pretrain_steps=card["config"]["pretrain_steps"],
            pretrain_loss_first=loss.get("first"),
            pretrain_loss_last=loss.get("last"),
        )
    )


STAGE = Stage(
    name="student",
    kind="model",
    build=_build,
    config=TinyModelConfig,
    expects={"data": "sft.v1"},
    summary=StudentSummary,
    describe="tiny Qwen2 student + tokenizer trained on the data",
    runs_model=True,
)
