"""The student and SFT steps: artifacts with lineage, reuse, family selection, crash → resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from transformers import AutoModelForCausalLM

import schemas
from coa import io
from coa.kit.launch import work_dir
from coa.model import step as student_step
from coa.model.config import StudentConfig
from coa.steps import ModelInput, TableInput, address, run_step
from coa.train import SFTError
from coa.train import step as sft_step
from coa.train.config import SFTStageConfig
from coa.train.data import select_examples
from coa.train.step import read_result

from .conftest import TINY
from .test_sft import CrashAt


@pytest.fixture()
def converted(sft_rows: pa.Table, tmp_path: Path) -> io.ArtifactRef:
    store = io.Store(str(tmp_path / "store"))
    writer = store.writer("converted", "coa", {"test": 1})
    writer.write_table("sft", sft_rows, schemas.SFT)
    return writer.commit()


def _stage(**kw: Any) -> SFTStageConfig:
    base: dict[str, Any] = dict(
        max_steps=4, learning_rate=3e-3, batch_size=8, max_length=256, logging_steps=1, save_steps=2,
        launcher="in_process",
    )  # fmt: skip
    return SFTStageConfig(**{**base, **kw})


def test_student_step_builds_the_tiny_model_once(converted: io.ArtifactRef, tmp_path: Path) -> None:
    store = io.Store(str(tmp_path / "store"))
    data = TableInput(converted, "sft")
    first = run_step(student_step.step(StudentConfig(tiny=TINY), data), store)
    assert first.ref.kind == "model" and not first.reused
    folder = ModelInput(ref=first.ref).local_path()
    assert (Path(folder) / "config.json").is_file() and (Path(folder) / "tokenizer.json").is_file()
    again = run_step(student_step.step(StudentConfig(tiny=TINY), data), store)
    assert (
        again.reused and again.ref.uri == first.ref.uri and again.ref.content_hash == first.ref.content_hash
    )
    with pytest.raises(ValueError, match="nothing to build"):
        student_step.step(StudentConfig(base="Qwen/Qwen2.5-7B-Instruct"), data)


def test_sft_step_commits_the_model_with_lineage_and_reuses_it(
    tiny_model: Path, converted: io.ArtifactRef, tmp_path: Path
) -> None:
    store = io.Store(str(tmp_path / "store"))
    step = sft_step.step(_stage(), ModelInput(external=str(tiny_model)), TableInput(converted, "sft"))
    built = run_step(step, store)
    ref, result = built.ref, read_result(built.ref)
    assert result.global_step == result.steps_planned == 4
    assert built.summary["steps_run"] == built.summary["steps_planned"] == 4
    folder = io.local_folder(ref, "model")
    tuned = AutoModelForCausalLM.from_pretrained(folder)
    assert tuned.config.vocab_size > 0
    assert {"model/config.json", "loss_curve.png", "sft_result.json"} <= set(ref.files)
    lineage = io.read_lineage(ref)
    assert lineage["base_model"] == str(tiny_model)
    dataset = {"uri": converted.uri, "content_hash": converted.content_hash, "examples": 64}
    assert lineage["dataset"] == dataset
    assert lineage["steps_planned"] == lineage["steps_run"] == 4
    assert [u["uri"] for u in lineage["upstream"]] == [converted.uri]
    assert not work_dir(store.root, ref.uri).exists()  # checkpoints removed after the commit
    again = run_step(step, store)
    assert again.reused and again.ref.uri == ref.uri and read_result(again.ref) == result


def test_sft_step_resumes_after_a_crash(tiny_model: Path, converted: io.ArtifactRef, tmp_path: Path) -> None:
    store = io.Store(str(tmp_path / "store"))
    base, data = ModelInput(external=str(tiny_model)), TableInput(converted, "sft")
    crashing = sft_step.step(_stage(), base, data, callbacks=[CrashAt(3)])
    with pytest.raises(KeyboardInterrupt):
        run_step(crashing, store)
    uri, _ = address(crashing, {"base": base, "data": data}, store)
    assert io.lookup(uri) is None  # nothing committed
    assert (work_dir(store.root, uri) / "checkpoints" / "checkpoint-2").is_dir()
    resumed = run_step(sft_step.step(_stage(), base, data), store)
    assert resumed.ref.uri == uri  # callbacks are not part of the identity
    result = read_result(resumed.ref)
    assert (result.start_step, result.steps_run, result.global_step) == (2, 2, 4)
    assert json.loads(io.read_file(resumed.ref, "sft_result.json"))["start_step"] == 2


def test_family_selection(sft_rows: pa.Table) -> None:
    assert select_examples(sft_rows, None).num_rows == sft_rows.num_rows
    assert select_examples(sft_rows, ["math", "code"]).num_rows == sft_rows.num_rows
    with pytest.raises(SFTError, match=r"no SFT example of families \['mhqa'\]; the data holds \['math'\]"):
        select_examples(sft_rows, ["mhqa"])
