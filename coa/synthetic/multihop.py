"""Multi-hop questions over a generated encyclopedia of fictional entities (family ``mhqa``).

The world and its documents are :mod:`coa.synthetic.encyclopedia` (a relation is stated only in its
subject's document, so every hop has exactly one gold document).

**The questions.** 2-hop and 3-hop questions compose relations, e.g. ``In which country is the
birthplace of the founder of Kelmo Corp?``; the gold answer is the final entity's name. The
structure :func:`parse_question` returns (and the metadata stores) is::

    {"template": "country", "variant": 0, "start": "Kelmo Corp",
     "relations": ["founder", "born_in", "country"], "hops": 3}

``relations`` are in the order they are applied to ``start``. :func:`hop_query` phrases one hop as
a single-hop question, the query a searching agent would send; the task metadata also lists the
resolved ``path`` (subject, relation, object, gold document id) of every hop.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import re
from typing import Any

import pyarrow as pa

from coa.synthetic._common import Split, draw_unique, rng_for, task_row, to_table
from coa.synthetic.encyclopedia import DEFAULT_ENTITIES, INNER_RELATIONS, RELATIONS, World, build_world

FAMILY = "multihop"
TASK_FAMILY = "mhqa"


def chains(hops: int) -> list[tuple[str, ...]]:
    """All type-consistent relation chains of length ``hops``."""
    out: list[tuple[str, ...]] = [(r,) for r in RELATIONS]
    for _ in range(hops - 1):
        out = [(*c, r) for c in out for r in RELATIONS if RELATIONS[c[-1]].object == RELATIONS[r].subject]
    return sorted(out)


def noun_phrase(start: str, relations: list[str] | tuple[str, ...]) -> str:
    """``start`` wrapped by the noun phrases of ``relations`` (applied first to last)."""
    x = start
    for rel in relations:
        x = RELATIONS[rel].noun_phrase.format(x=x)
    return x


def render_question(start: str, relations: list[str] | tuple[str, ...], variant: int = 0) -> str:
    """The question asking for the end of the chain ``relations`` from ``start``."""
    *inner, last = relations
    return RELATIONS[last].questions[variant].format(x=noun_phrase(start, inner))


def hop_query(relation: str, subject: str, variant: int = 0) -> str:
    """One hop as a single-hop question: the search query an agent would send for it."""
    return RELATIONS[relation].questions[variant].format(x=subject)


_NAME = re.compile(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*")
_FRAMES: list[tuple[str, int, re.Pattern[str]]] = [
    (r.name, i, re.compile(re.escape(q).replace(re.escape("{x}"), "(?P<x>.+)")))
    for r in RELATIONS.values()
    for i, q in enumerate(r.questions)
]
_PREFIXES: list[tuple[str, str]] = [
    (r, RELATIONS[r].noun_phrase.removesuffix("{x}")) for r in INNER_RELATIONS
]


def _peel(x: str) -> tuple[str, list[str]] | None:
    """Split a noun phrase into its start entity and relations (first applied first)."""
    outer_first: list[str] = []
    while True:
        for rel, prefix in _PREFIXES:
            if x.startswith(prefix):
                outer_first.append(rel)
                x = x[len(prefix) :]
                break
        else:
            break
    if not _NAME.fullmatch(x):
        return None
    return x, outer_first[::-1]


def _consistent(relations: list[str]) -> bool:
    return all(RELATIONS[a].object == RELATIONS[b].subject for a, b in itertools.pairwise(relations))


def parse_question(question: str) -> dict[str, Any]:
    """Invert the templates: ``{template, variant, start, relations, hops}`` of ``question``.

    Raises ``ValueError`` when the question comes from no template.
    """
    q = question.strip()
    for last, variant, frame in _FRAMES:
        m = frame.fullmatch(q)
        if m is None:
            continue
        peeled = _peel(m.group("x"))
        if peeled is None:
            continue
        start, inner = peeled
        relations = [*inner, last]
        if not _consistent(relations):
            continue
        return structure_of(start, relations, variant)
    raise ValueError(f"not a synthetic multi-hop question: {question[:120]!r}")


def structure_of(start: str, relations: list[str] | tuple[str, ...], variant: int) -> dict[str, Any]:
    return {
        "template": relations[-1],
        "variant": variant,
        "start": start,
        "relations": list(relations),
        "hops": len(relations),
    }


@dataclasses.dataclass(frozen=True)
class _Candidate:
    question: str
    split_key: str
    dedup_key: str
    structure: dict[str, Any]
    path: list[dict[str, str]]


def _candidate_fn(world: World, hop_weights: tuple[float, float]) -> Any:
    by_hops = {2: chains(2), 3: chains(3)}

    def candidate(rng: random.Random) -> _Candidate | Any:
        while True:
            hops = rng.choices((2, 3), weights=hop_weights)[0]
            chain = rng.choice(by_hops[hops])
            start = rng.choice(world.of_kind(RELATIONS[chain[0]].subject))
            try:
                path = world.resolve(start.name, list(chain))
            except KeyError:
                continue
            variant = rng.randrange(len(RELATIONS[chain[-1]].questions))
            question = render_question(start.name, chain, variant)
            return _Candidate(
                question=question,
                split_key=f"{FAMILY}|{world.seed}|{world.n_entities}|{start.id}",
                dedup_key=f"{start.id}|{'/'.join(chain)}",
                structure=structure_of(start.name, chain, variant),
                path=path,
            )

    return candidate


def generate_rows(
    n: int,
    seed: int,
    split: Split,
    *,
    encyclopedia_seed: int = 0,
    n_entities: int = DEFAULT_ENTITIES,
    hop_weights: tuple[float, float] = (0.6, 0.4),
) -> list[dict[str, Any]]:
    world = build_world(encyclopedia_seed, n_entities)
    rng = rng_for(FAMILY, seed, split, encyclopedia_seed, n_entities)
    cands = draw_unique(rng, n, split, _candidate_fn(world, hop_weights), what=FAMILY)
    return [
        task_row(
            family_name=FAMILY,
            task_family=TASK_FAMILY,
            split=split,
            index=i,
            seed=seed,
            question=c.question,
            gold_answers=[c.path[-1]["object"]],
            structure=c.structure,
            extra={
                "path": c.path,
                "encyclopedia": {"seed": encyclopedia_seed, "n_entities": n_entities},
            },
        )
        for i, c in enumerate(cands)
    ]


def generate(
    n: int,
    seed: int = 0,
    split: Split = "train",
    *,
    encyclopedia_seed: int = 0,
    n_entities: int = DEFAULT_ENTITIES,
) -> pa.Table:
    """``n`` multi-hop tasks of ``split`` over the encyclopedia ``(encyclopedia_seed, n_entities)``.

    The split of a question is fixed by its start entity: a held-out question never starts from an
    entity that a training question starts from.
    """
    return to_table(generate_rows(n, seed, split, encyclopedia_seed=encyclopedia_seed, n_entities=n_entities))
