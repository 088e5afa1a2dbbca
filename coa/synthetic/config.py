"""The synthetic tasks' config: which families, how many per split, the seed, the encyclopedia.

Config only: loading it loads no generator (they are :mod:`coa.synthetic.families` and the modules of
each family)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.config import StrictModel

SyntheticFamily = Literal["arithmetic", "multihop", "programming"]
SYNTHETIC_FAMILIES: tuple[SyntheticFamily, ...] = ("arithmetic", "multihop", "programming")
Split = Literal["train", "heldout"]
SPLITS: tuple[Split, ...] = ("train", "heldout")
DEFAULT_ENTITIES = 300
"""Entities in the multi-hop encyclopedia by default."""
MIN_ENTITIES = 24
"""The fewest entities an encyclopedia is built with."""

_DEFAULT_TRAIN: dict[SyntheticFamily, int] = {"arithmetic": 200, "multihop": 200, "programming": 100}
_DEFAULT_HELDOUT: dict[SyntheticFamily, int] = {"arithmetic": 50, "multihop": 50, "programming": 25}


class SyntheticConfig(StrictModel):
    """Which synthetic tasks to build: counts per family and split, the seed, the encyclopedia."""

    train: dict[SyntheticFamily, int] = Field(
        default_factory=lambda: dict(_DEFAULT_TRAIN),
        description="Number of training tasks per family (a family left out gets none).",
    )
    heldout: dict[SyntheticFamily, int] = Field(
        default_factory=lambda: dict(_DEFAULT_HELDOUT),
        description="Number of held-out tasks per family; never shares a question with train.",
    )
    seed: int = Field(default=0, ge=0, description="Base seed; each family and split derives its own.")
    arithmetic_templates: tuple[str, ...] | None = Field(
        default=None,
        description="Arithmetic templates to draw from; null = all but `chain` (a op b op c, operands "
        "10-999: the short-number shape a tiny student learns first).",
    )
    encyclopedia_seed: int = Field(default=0, ge=0, description="Seed of the multi-hop encyclopedia.")
    encyclopedia_size: int = Field(
        default=DEFAULT_ENTITIES,
        ge=MIN_ENTITIES,
        description="Number of entities in the encyclopedia (distractor pages come on top).",
    )

    def counts(self, split: Split) -> dict[SyntheticFamily, int]:
        return dict(self.train if split == "train" else self.heldout)
