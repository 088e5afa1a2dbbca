"""The synthetic-tasks step: the built-in families as one artifact: the ``train`` and ``heldout``
splits (``task.v1``) and the ``encyclopedia`` (``document.v1``) the multi-hop questions are drawn
from, which every step whose search is local takes as its input."""

from __future__ import annotations

from pydantic import Field

import schemas
from coa.steps import Build, Stage, Step, StepSummary
from coa.synthetic import SyntheticConfig, encyclopedia_table, generate_all

SPLITS = ("train", "heldout")
ENCYCLOPEDIA_TABLE = "encyclopedia"
"""The table of the encyclopedia's documents: the collection a local search serves."""


class SyntheticSummary(StepSummary):
    """What the synthetic step generated: tasks per split, pages of the encyclopedia."""

    train: int = Field(description="Tasks of the train split.")
    heldout: int = Field(description="Tasks of the held-out split.")
    documents: int = Field(default=0, description="Pages of the encyclopedia (entities and distractors).")


def step(config: SyntheticConfig, name: str = "synthetic") -> Step:
    """Generate the train and held-out splits (disjoint questions) and the encyclopedia, keyed by the
    config alone."""
    return STAGE.step(config, name=name, artifact="synthetic")


def _build(b: Build) -> None:
    config: SyntheticConfig = b.step.config
    tables = generate_all(config)
    for split in SPLITS:
        b.writer.write_table(split, tables[split], schemas.TASK)
    documents = encyclopedia_table(config.encyclopedia_seed, config.encyclopedia_size)
    b.writer.write_table(ENCYCLOPEDIA_TABLE, documents, schemas.DOCUMENT)
    b.report(
        SyntheticSummary(
            train=tables["train"].num_rows, heldout=tables["heldout"].num_rows, documents=documents.num_rows
        )
    )


STAGE = Stage(
    name="synthetic",
    kind="tasks",
    build=_build,
    config=SyntheticConfig,
    produces={**{split: schemas.TASK.id for split in SPLITS}, ENCYCLOPEDIA_TABLE: schemas.DOCUMENT.id},
    summary=SyntheticSummary,
    describe="generate the synthetic task families and their encyclopedia",
)
