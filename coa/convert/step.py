"""The convert step: a curate artifact → ``sft`` (sft.v1), ``rl_prompts`` (rl_prompt.v1), ``quarantine``."""

from __future__ import annotations

import json

import schemas
from coa import io
from coa.convert.config import ConvertConfig
from coa.convert.core import rl_prompts, sft_examples
from coa.curate.step import TASK_STATS
from coa.steps import Build, Step, StepInput

SFT_BATCH_ROWS = 1000


def step(config: ConvertConfig, curated: StepInput, tasks: StepInput, name: str = "convert") -> Step:
    """Convert the curated runs (``trajectories`` of ``curated``) and the RL prompts of ``tasks``."""
    return Step(
        name=name,
        kind="converted",
        artifact=config.name,
        config=config,
        build=_build,
        inputs={"curated": curated, "tasks": tasks},
        describe="CoA SFT examples and RL prompts",
        expects={"curated": "trajectory.v1", "tasks": "task.v1"},
        produces={"sft": "sft.v1", "rl_prompts": "rl_prompt.v1", "quarantine": "quarantine.v1"},
    )


def _build(b: Build) -> None:
    config: ConvertConfig = b.step.config
    curated, tasks = b.table("curated"), b.table("tasks")
    stats = json.loads(io.read_file(curated.ref, TASK_STATS)) if TASK_STATS in curated.ref.files else {}
    quarantined = []
    with b.writer.table_writer("sft", schemas.SFT) as write_sft:
        for batch in io.iter_batches(curated.ref, curated.table, batch_rows=SFT_BATCH_ROWS):
            examples, rejected = sft_examples(batch.to_pylist(), config, curated.uri)
            if examples:
                write_sft(schemas.SFT.from_rows(examples))
            quarantined += rejected
    prompts, rejected = rl_prompts(tasks.read(), stats, config, tasks.uri)
    b.writer.write_table("rl_prompts", schemas.RL_PROMPT.from_rows(prompts), schemas.RL_PROMPT)
    rows = schemas.QUARANTINE.from_rows(quarantined + rejected)
    b.writer.write_table("quarantine", rows, schemas.QUARANTINE)
    b.summary.update({name: info["rows"] for name, info in b.writer.tables.items()})
