"""Built-in synthetic task families with known answers, as ``task.v1`` tables.

Three families, each generated deterministically from a seed:

- ``arithmetic`` (task family ``math``): multi-step arithmetic/algebra word problems whose numbers
  call for the code tool; gold answer an integer string (:mod:`coa.synthetic.arithmetic`);
- ``multihop`` (``mhqa``): 2- and 3-hop questions over a generated encyclopedia of fictional
  entities; gold answer the final entity's name (:mod:`coa.synthetic.multihop`; the world and
  its documents, which a search tool serves, are :mod:`coa.synthetic.encyclopedia`);
- ``programming`` (``code``): small stdin/stdout programs with generated tests
  (:mod:`coa.synthetic.programming`).

``generate(family, n, seed, split)`` returns one family's tasks; :func:`generate_all` builds every
family and split a :class:`SyntheticConfig` asks for and checks that ``train`` and ``heldout``
share no question. ``parse_question(family, question)`` inverts a family's templates (the offline
rule-based teacher uses it to act like an LLM would).

Task ids look like ``synthetic-arithmetic:train-00012`` (source ``synthetic-arithmetic``); the
metadata JSON holds the generator, split, seed, template and the parsed ``structure``.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from coa.config import StrictModel
from coa.synthetic import arithmetic, encyclopedia, multihop, programming
from coa.synthetic._common import (
    SPLITS,
    Split,
    SyntheticError,
    assert_disjoint,
    check_split,
    split_of,
)
from coa.synthetic.encyclopedia import Document, World, build_encyclopedia, build_world
from coa.synthetic.multihop import hop_query
from schemas import TASK

SyntheticFamily = Literal["arithmetic", "multihop", "programming"]
SYNTHETIC_FAMILIES: tuple[SyntheticFamily, ...] = ("arithmetic", "multihop", "programming")
TASK_FAMILY: dict[str, str] = {
    "arithmetic": arithmetic.TASK_FAMILY,
    "multihop": multihop.TASK_FAMILY,
    "programming": programming.TASK_FAMILY,
}

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
        default=encyclopedia.DEFAULT_ENTITIES,
        ge=encyclopedia.MIN_ENTITIES,
        description="Number of entities in the encyclopedia (distractor pages come on top).",
    )

    def counts(self, split: Split) -> dict[SyntheticFamily, int]:
        return dict(self.train if split == "train" else self.heldout)


def _check_family(family: str) -> SyntheticFamily:
    if family not in SYNTHETIC_FAMILIES:
        raise SyntheticError(
            f"unknown synthetic family {family!r}; expected one of {', '.join(SYNTHETIC_FAMILIES)}"
        )
    return family  # type: ignore[return-value]


def generate(
    family: str,
    n: int,
    seed: int = 0,
    split: str = "train",
    *,
    encyclopedia_seed: int = 0,
    encyclopedia_size: int = encyclopedia.DEFAULT_ENTITIES,
    arithmetic_templates: tuple[str, ...] | None = None,
) -> pa.Table:
    """``n`` tasks of one synthetic ``family`` for ``split`` (``train``/``heldout``), as ``task.v1``.

    Deterministic in its arguments. ``encyclopedia_*`` only matter for ``multihop``.
    """
    fam = _check_family(family)
    sp = check_split(split)
    if n < 0:
        raise SyntheticError(f"n must be >= 0, got {n}")
    if fam == "arithmetic":
        return arithmetic.generate(n, seed, sp, arithmetic_templates)
    if fam == "multihop":
        return multihop.generate(
            n, seed, sp, encyclopedia_seed=encyclopedia_seed, n_entities=encyclopedia_size
        )
    return programming.generate(n, seed, sp)


def generate_all(config: SyntheticConfig) -> dict[str, pa.Table]:
    """One concatenated ``task.v1`` table per split, with the dedup check between the splits."""
    tables: dict[str, pa.Table] = {}
    for split in SPLITS:
        parts = [
            generate(
                family,
                count,
                config.seed,
                split,
                encyclopedia_seed=config.encyclopedia_seed,
                encyclopedia_size=config.encyclopedia_size,
                arithmetic_templates=config.arithmetic_templates,
            )
            for family, count in config.counts(split).items()
            if count > 0
        ]
        tables[split] = pa.concat_tables(parts) if parts else TASK.empty_table()
    assert_disjoint(tables["train"], tables["heldout"])
    return tables


def parse_question(family: str, question: str) -> dict[str, Any]:
    """Invert ``family``'s templates: the structured problem behind ``question``.

    ``arithmetic``: template, variant, operands and the Python ``expression`` of the answer;
    ``multihop``: template, variant, ``start`` entity, ``relations`` (first applied first), ``hops``;
    ``programming``: template, ``spec`` id and ``params``. Raises ``ValueError`` if no template fits.
    """
    fam = _check_family(family)
    if fam == "arithmetic":
        return arithmetic.parse_question(question)
    if fam == "multihop":
        return multihop.parse_question(question)
    return programming.parse_question(question)


__all__ = [
    "SPLITS",
    "SYNTHETIC_FAMILIES",
    "TASK_FAMILY",
    "Document",
    "Split",
    "SyntheticConfig",
    "SyntheticError",
    "SyntheticFamily",
    "World",
    "arithmetic",
    "assert_disjoint",
    "build_encyclopedia",
    "build_world",
    "generate",
    "generate_all",
    "hop_query",
    "multihop",
    "parse_question",
    "programming",
    "split_of",
]
