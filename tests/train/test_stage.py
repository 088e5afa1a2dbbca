"""The student and SFT pipeline stages: artifacts with lineage, reuse, family selection, crash → resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from transformers import AutoModelForCausalLM

import schemas
from coa import io
from coa.train import SFTError
from coa.train.stage import (
    SFTStageConfig,
    StudentConfig,
    StudentModel,
    run_sft_stage,
    run_student_stage,
    select_examples,
    work_dir,
)

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


def test_student_stage_builds_the_tiny_model_once(converted: io.ArtifactRef, tmp_path: Path) -> None:
    store = io.Store(str(tmp_path / "store"))
    first = run_student_stage(StudentConfig(tiny=TINY), converted, store)
    assert first.ref is not None and first.ref.kind == "model"
    assert (Path(first.path) / "config.json").is_file() and (Path(first.path) / "tokenizer.json").is_file()
    again = run_student_stage(StudentConfig(tiny=TINY), converted, store)
    assert again.ref.uri == first.ref.uri and again.ref.content_hash == first.ref.content_hash
    given = run_student_stage(StudentConfig(base="Qwen/Qwen2.5-7B-Instruct"), converted, store)
    assert given == StudentModel("Qwen/Qwen2.5-7B-Instruct")


def test_sft_stage_commits_the_model_with_lineage_and_reuses_it(
    tiny_model: Path, converted: io.ArtifactRef, tmp_path: Path
) -> None:
    store = io.Store(str(tmp_path / "store"))
    ref, result = run_sft_stage(_stage(), StudentModel(str(tiny_model)), converted, store)
    assert result.global_step == result.steps_planned == 4
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
    assert not work_dir(store, ref.uri).exists()  # checkpoints removed after the commit
    again, again_result = run_sft_stage(_stage(), StudentModel(str(tiny_model)), converted, store)
    assert again.uri == ref.uri and again_result == result


def test_sft_stage_resumes_after_a_crash(tiny_model: Path, converted: io.ArtifactRef, tmp_path: Path) -> None:
    store = io.Store(str(tmp_path / "store"))
    base = StudentModel(str(tiny_model))
    with pytest.raises(KeyboardInterrupt):
        run_sft_stage(_stage(), base, converted, store, callbacks=[CrashAt(3)])
    identity = {"sft": _stage().model_dump(mode="json"), "base_model": str(tiny_model)}
    address, _ = store.address("model", "sft", identity, [converted])
    assert io.lookup(address) is None  # nothing committed
    assert (work_dir(store, address) / "checkpoints" / "checkpoint-2").is_dir()
    ref, result = run_sft_stage(_stage(), base, converted, store)
    assert ref.uri == address
    assert (result.start_step, result.steps_run, result.global_step) == (2, 2, 4)
    assert json.loads(io.read_file(ref, "sft_result.json"))["start_step"] == 2


def test_family_selection(sft_rows: pa.Table) -> None:
    assert select_examples(sft_rows, None).num_rows == sft_rows.num_rows
    assert select_examples(sft_rows, ["math", "code"]).num_rows == sft_rows.num_rows
    with pytest.raises(SFTError, match=r"no SFT example of families \['mhqa'\]; the data holds \['math'\]"):
        select_examples(sft_rows, ["mhqa"])
