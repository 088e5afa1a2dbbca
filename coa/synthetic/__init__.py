"""Built-in synthetic task families with known answers, as ``task.v1`` tables.

Three families, each generated deterministically from a seed:

- ``arithmetic`` (task family ``math``): multi-step arithmetic/algebra word problems whose numbers
  call for the code tool; gold answer an integer string (:mod:`coa.synthetic.arithmetic`);
- ``multihop`` (``mhqa``): 2- and 3-hop questions over a generated encyclopedia of fictional
  entities; gold answer the final entity's name (:mod:`coa.synthetic.multihop`; the world and
  its documents, which the synthetic step commits as its ``encyclopedia`` table for the local search,
  are :mod:`coa.synthetic.encyclopedia`);
- ``programming`` (``code``): small stdin/stdout programs with generated tests
  (:mod:`coa.synthetic.programming`).

``generate(family, n, seed, split)`` (:mod:`coa.synthetic.families`) returns one family's tasks;
:func:`generate_all` builds every family and split a :class:`SyntheticConfig` asks for and checks
that ``train`` and ``heldout`` share no question. ``parse_question(family, question)`` inverts a
family's templates (the offline rule-based teacher uses it to act like an LLM would).

Task ids look like ``synthetic-arithmetic:train-00012`` (source ``synthetic-arithmetic``); the
metadata JSON holds the generator, split, seed, template and the parsed ``structure``.
"""

from typing import TYPE_CHECKING, Any

from coa.synthetic.config import SPLITS, SYNTHETIC_FAMILIES, Split, SyntheticConfig, SyntheticFamily

if TYPE_CHECKING:
    from coa.synthetic import arithmetic, multihop, programming
    from coa.synthetic._common import SyntheticError, assert_disjoint, split_of
    from coa.synthetic.encyclopedia import (
        Document,
        World,
        build_encyclopedia,
        build_world,
        encyclopedia_table,
    )
    from coa.synthetic.families import TASK_FAMILY, generate, generate_all, parse_question
    from coa.synthetic.multihop import hop_query

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
    "encyclopedia_table",
    "generate",
    "generate_all",
    "hop_query",
    "multihop",
    "parse_question",
    "programming",
    "split_of",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the generators load on first use, so loading the config loads none of them."""
    if name in ("SyntheticError", "assert_disjoint", "split_of"):
        from coa.synthetic import _common

        return getattr(_common, name)
    if name in ("Document", "World", "build_encyclopedia", "build_world", "encyclopedia_table"):
        from coa.synthetic import encyclopedia

        return getattr(encyclopedia, name)
    if name in ("TASK_FAMILY", "generate", "generate_all", "parse_question"):
        from coa.synthetic import families

        return getattr(families, name)
    if name == "hop_query":
        from coa.synthetic import multihop

        return multihop.hop_query
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
