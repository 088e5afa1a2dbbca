"""The synthetic-tasks step: the built-in families as one ``task.v1`` artifact (``train``, ``heldout``)."""

from __future__ import annotations

import schemas
from coa.steps import Build, Step
from coa.synthetic import SyntheticConfig, generate_all

SPLITS = ("train", "heldout")


def step(config: SyntheticConfig, name: str = "synthetic") -> Step:
    """Generate the train and held-out splits (disjoint questions), keyed by the config alone."""
    return Step(
        name=name,
        builder="synthetic",
        kind="tasks",
        artifact="synthetic",
        config=config,
        build=_build,
        describe="generate the synthetic task families",
        produces={split: "task.v1" for split in SPLITS},
    )


def _build(b: Build) -> None:
    tables = generate_all(b.step.config)
    for split in SPLITS:
        b.writer.write_table(split, tables[split], schemas.TASK)
        b.summary[split] = tables[split].num_rows
