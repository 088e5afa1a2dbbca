"""Synthetic tasks of every family: :func:`generate` (one family), :func:`generate_all` (what a
:class:`~coa.synthetic.config.SyntheticConfig` asks for, train and held-out disjoint) and
:func:`parse_question` (a family's templates inverted, for the offline teacher)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from coa.synthetic import arithmetic, encyclopedia, multihop, programming
from coa.synthetic._common import SPLITS, SyntheticError, assert_disjoint, check_split
from coa.synthetic.config import SYNTHETIC_FAMILIES, SyntheticConfig, SyntheticFamily
from schemas import TASK

TASK_FAMILY: dict[str, str] = {
    "arithmetic": arithmetic.TASK_FAMILY,
    "multihop": multihop.TASK_FAMILY,
    "programming": programming.TASK_FAMILY,
}


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
