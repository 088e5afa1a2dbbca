"""The synthetic-tasks step: the built-in families as one ``task.v1`` artifact (``train``, ``heldout``)."""

from __future__ import annotations

from pydantic import Field

import schemas
from coa.steps import Build, Stage, Step, StepSummary
from coa.synthetic import SyntheticConfig, generate_all

SPLITS = ("train", "heldout")


class SyntheticSummary(StepSummary):
    """What the synthetic step generated: tasks per split."""

    train: int = Field(description="Tasks of the train split.")
    heldout: int = Field(description="Tasks of the held-out split.")


def step(config: SyntheticConfig, name: str = "synthetic") -> Step:
    """Generate the train and held-out splits (disjoint questions), keyed by the config alone."""
    return Step(name=name, stage=STAGE, artifact="synthetic", config=config, describe=STAGE.describe)


def _build(b: Build) -> None:
    tables = generate_all(b.step.config)
    for split in SPLITS:
        b.writer.write_table(split, tables[split], schemas.TASK)
    b.report(SyntheticSummary(train=tables["train"].num_rows, heldout=tables["heldout"].num_rows))


STAGE = Stage(
    name="synthetic",
    kind="tasks",
    build=_build,
    config=SyntheticConfig,
    produces={split: "task.v1" for split in SPLITS},
    summary=SyntheticSummary,
    describe="generate the synthetic task families",
)
