"""The encyclopedia behind the multi-hop family: a generated world of fictional entities and its pages.

**The world.** :func:`build_world` makes people, cities, countries, companies, universities and
rivers, and links them by functional relations (:data:`RELATIONS`: ``founder``, ``headquarters``,
``born_in``, ``mentor``, ``alma_mater``, ``university_city``, ``country``, ``river``). Names are
made of consonant–vowel syllables (``Kalo``, ``Mira Tove``, ``Dano River``, ``Velamo``), every name
word is used once, and no real model can know them, so the answer can only come from the documents.
Short syllable names are meant to be easy to copy for a tiny model with a small tokenizer.

**The documents.** :func:`build_encyclopedia` returns one :class:`Document` per entity, stating each
of its relations in a natural sentence (plus filler facts), and distractor documents (events that
mention several entities without stating any relation). A relation is stated only in its subject's
document, so every hop has exactly one gold document. The questions over it are
:mod:`coa.synthetic.multihop`. :func:`encyclopedia_table` gives the documents as a ``document.v1``
table: the synthetic step commits it as its ``encyclopedia`` table, and the local search of every
step that searches locally builds its index from that table (never from a seed of its own).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
from collections.abc import Mapping
from types import MappingProxyType

import pyarrow as pa

import schemas
from coa.synthetic._common import SyntheticError, rng_for
from coa.synthetic.config import DEFAULT_ENTITIES, MIN_ENTITIES

MENTOR_WINDOW = 12

KINDS = ("person", "city", "country", "company", "university", "river")

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
SYLLABLES = tuple(c + v for c in CONSONANTS for v in VOWELS)
"""The 70 consonant–vowel syllables every name is built from."""

COMPANY_SUFFIXES = ("Corp", "Labs", "Works", "Group")


@dataclasses.dataclass(frozen=True)
class Document:
    """One encyclopedia page: a stable id, a title and plain text."""

    id: str
    title: str
    text: str


@dataclasses.dataclass(frozen=True)
class Entity:
    id: str
    kind: str
    name: str


@dataclasses.dataclass(frozen=True)
class Relation:
    """A functional relation ``subject kind -> object kind`` and how it is phrased."""

    name: str
    subject: str
    object: str
    noun_phrase: str
    """Prefix form used inside a longer question, e.g. ``the founder of {x}``."""
    questions: tuple[str, ...]
    """Question frames when this relation is the last hop, e.g. ``Who founded {x}?``."""
    sentences: tuple[str, ...]
    """How the subject's document states the fact, with ``{s}`` and ``{o}``."""


RELATIONS: dict[str, Relation] = {
    r.name: r
    for r in (
        Relation(
            "founder",
            "company",
            "person",
            "the founder of {x}",
            ("Who founded {x}?", "Who is the founder of {x}?"),
            ("{s} was founded by {o}.", "{o} founded {s}."),
        ),
        Relation(
            "headquarters",
            "company",
            "city",
            "the headquarters city of {x}",
            ("In which city is {x} headquartered?", "Where are the headquarters of {x}?"),
            ("{s} is headquartered in {o}.", "The headquarters of {s} are in {o}."),
        ),
        Relation(
            "born_in",
            "person",
            "city",
            "the birthplace of {x}",
            ("In which city was {x} born?", "Where was {x} born?"),
            ("{s} was born in {o}.", "{s} was born in the city of {o}."),
        ),
        Relation(
            "mentor",
            "person",
            "person",
            "the mentor of {x}",
            ("Who was the mentor of {x}?", "Who mentored {x}?"),
            ("The mentor of {s} was {o}.", "{s} was mentored by {o}."),
        ),
        Relation(
            "alma_mater",
            "person",
            "university",
            "the university attended by {x}",
            ("Which university did {x} attend?", "At which university did {x} study?"),
            ("{s} studied at {o}.", "{s} attended {o}."),
        ),
        Relation(
            "university_city",
            "university",
            "city",
            "the home city of {x}",
            ("In which city is {x} located?", "Which city is {x} in?"),
            ("{s} is located in the city of {o}.", "{s} has its campus in the city of {o}."),
        ),
        Relation(
            "country",
            "city",
            "country",
            "the country of {x}",
            ("In which country is {x}?", "Which country does {x} belong to?"),
            ("{s} is a city in the country of {o}.", "{s} lies in the country of {o}."),
        ),
        Relation(
            "river",
            "city",
            "river",
            "the river of {x}",
            ("On which river does {x} lie?", "Which river flows through {x}?"),
            ("{s} lies on the {o}.", "The {o} flows through {s}."),
        ),
    )
}

INNER_RELATIONS = tuple(
    r for r in RELATIONS if RELATIONS[r].object in {rel.subject for rel in RELATIONS.values()}
)
"""Relations whose object has relations of its own, so they can appear before the last hop."""

_PROFESSIONS = ("engineer", "painter", "chemist", "sailor", "architect", "poet", "surgeon", "banker")
_PRODUCTS = ("bicycles", "glass", "paper", "engines", "ceramics", "radios", "textiles", "clocks")
_KNOWN_FOR = ("bridges", "markets", "gardens", "harbour", "towers", "festivals", "museums", "mills")
_EVENTS = ("Festival", "Summit", "Fair", "Regatta", "Congress")
_REAL_WORDS = (
    "bare bode dame dime done dose dune fade fame fate fine fire five game gate gave kite lake lame late "
    "lime line lobe lone made make male mane mare mate mile mime mine mode mole more mote mule name note "
    "pale pane pile pine pole pose race rate ride ripe robe rode role rope rose rude rule safe sale same "
    "side site sole some sore tale tame tape time tone tore tune vase vile vine vote wade were wide wine "
    "wise zone"
)
_STOP_NAMES = frozenset(_REAL_WORDS.split())
"""Syllable pairs that are English words: never used as names."""


@dataclasses.dataclass(frozen=True)
class World:
    """The generated encyclopedia: entities, relation facts and documents."""

    seed: int
    n_entities: int
    entities: tuple[Entity, ...]
    facts: Mapping[tuple[str, str], str]
    """``(relation, subject entity id) -> object entity id``."""
    documents: tuple[Document, ...]

    @functools.cached_property
    def by_id(self) -> Mapping[str, Entity]:
        return MappingProxyType({e.id: e for e in self.entities})

    @functools.cached_property
    def by_name(self) -> Mapping[str, Entity]:
        return MappingProxyType({e.name: e for e in self.entities})

    def of_kind(self, kind: str) -> tuple[Entity, ...]:
        return tuple(e for e in self.entities if e.kind == kind)

    def object_of(self, relation: str, subject: str) -> str | None:
        """The object's name for ``relation`` applied to the entity named ``subject`` (None if unset)."""
        ent = self.by_name.get(subject)
        if ent is None:
            return None
        obj = self.facts.get((relation, ent.id))
        return None if obj is None else self.by_id[obj].name

    def doc_id_of(self, name: str) -> str:
        """The id of the document about the entity named ``name`` (entity ids are document ids)."""
        return self.by_name[name].id

    def resolve(self, start: str, relations: list[str]) -> list[dict[str, str]]:
        """Walk ``relations`` from ``start``: one ``{subject, relation, object, doc_id}`` per hop."""
        path = []
        current = start
        for rel in relations:
            obj = self.object_of(rel, current)
            if obj is None:
                raise KeyError(f"{rel} of {current!r} is not defined")
            path.append(
                {"subject": current, "relation": rel, "object": obj, "doc_id": self.doc_id_of(current)}
            )
            current = obj
        return path


def _name_words(rng: random.Random, count: int) -> list[str]:
    two = ["".join(p) for p in itertools.product(SYLLABLES, repeat=2)]
    words = [w for w in two if w not in _STOP_NAMES]
    rng.shuffle(words)
    if count > len(words):
        three = ["".join(p) for p in itertools.product(SYLLABLES, repeat=3)]
        extra = rng.sample(three, count - len(words))
        words += extra
    return [w.capitalize() for w in words[:count]]


def _kind_counts(n: int) -> dict[str, int]:
    if n < MIN_ENTITIES:
        raise SyntheticError(f"an encyclopedia needs at least {MIN_ENTITIES} entities, got {n}")
    counts = {
        "person": round(0.40 * n),
        "city": round(0.16 * n),
        "company": round(0.15 * n),
        "university": round(0.10 * n),
        "river": round(0.08 * n),
    }
    counts["country"] = n - sum(counts.values())
    return counts


def _fill(rng: random.Random, pool: tuple[str, ...]) -> str:
    return rng.choice(pool)


def _entity_text(
    rng: random.Random,
    world_facts: dict[tuple[str, str], str],
    ent: Entity,
    names: dict[str, str],
    words: list[str],
) -> str:
    s = ent.name
    sentences: list[str] = []
    if ent.kind == "person":
        job = _fill(rng, _PROFESSIONS)
        sentences.append(f"{s} is {'an' if job[0] in 'aeiou' else 'a'} {job}.")
        sentences.append(f"{s} has published {rng.randint(2, 40)} papers.")
    elif ent.kind == "company":
        sentences.append(f"{s} makes {_fill(rng, _PRODUCTS)} and employs {rng.randint(20, 9000)} people.")
        sentences.append(f"{s} opened its first office in {rng.randint(1850, 2015)}.")
    elif ent.kind == "city":
        sentences.append(
            f"{s} has a population of {rng.randint(5, 900) * 1000} and is known for its "
            f"{_fill(rng, _KNOWN_FOR)}."
        )
    elif ent.kind == "university":
        sentences.append(
            f"{s} was established in {rng.randint(1500, 1990)} and has {rng.randint(2, 60) * 1000} students."
        )
    elif ent.kind == "country":
        sentences.append(f"{s} is a country with a population of {rng.randint(1, 90)} million.")
        sentences.append(f"The currency of {s} is the {words.pop()}.")
    elif ent.kind == "river":
        sentences.append(f"The {s} is {rng.randint(40, 3000)} km long.")
        sentences.append(f"The {s} flows into the {words.pop()} Sea.")
    stated = [
        rng.choice(rel.sentences).format(s=s, o=names[world_facts[(rel.name, ent.id)]])
        for rel in RELATIONS.values()
        if (rel.name, ent.id) in world_facts
    ]
    facts_first = sentences[:1] + stated + sentences[1:]
    return " ".join(facts_first)


def _distractor(rng: random.Random, index: int, by_kind: dict[str, list[Entity]], word: str) -> Document:
    year = rng.randint(1900, 2020)
    event = f"{year} {word} {rng.choice(_EVENTS)}"
    city = rng.choice(by_kind["city"]).name
    p1, p2 = rng.sample(by_kind["person"], 2)
    company = rng.choice(by_kind["company"]).name
    uni = rng.choice(by_kind["university"]).name
    text = (
        f"The {event} was held in {city}. {p1.name} gave the opening talk and {p2.name} chaired the closing "
        f"session. {company} sponsored the event, and students from {uni} volunteered."
    )
    return Document(id=f"event-{index:04d}", title=f"{event}", text=text)


@functools.lru_cache(maxsize=8)
def build_world(seed: int = 0, n_entities: int = DEFAULT_ENTITIES) -> World:
    """The encyclopedia world for ``seed`` and ``n_entities`` (deterministic, cached)."""
    rng = rng_for("multihop", "world", seed, n_entities)  # the stream of the family it serves
    counts = _kind_counts(n_entities)
    n_distractors = max(4, n_entities // 3)
    n_words = counts["person"] * 2 + n_entities + n_distractors + counts["country"] + counts["river"]
    words = _name_words(rng, n_words)
    word_iter = iter(words)

    entities: list[Entity] = []
    for kind in KINDS:
        for i in range(counts[kind]):
            w = next(word_iter)
            if kind == "person":
                name = f"{w} {next(word_iter)}"
            elif kind == "company":
                name = f"{w} {rng.choice(COMPANY_SUFFIXES)}"
            elif kind == "university":
                name = f"{w} University"
            elif kind == "river":
                name = f"{w} River"
            else:
                name = w
            entities.append(Entity(id=f"{kind}-{i:04d}", kind=kind, name=name))
    by_kind: dict[str, list[Entity]] = {k: [e for e in entities if e.kind == k] for k in KINDS}

    facts: dict[tuple[str, str], str] = {}
    people = by_kind["person"]
    founders = rng.sample(people, min(len(people), len(by_kind["company"])))
    for i, company in enumerate(by_kind["company"]):
        founder = founders[i] if i < len(founders) else rng.choice(people)
        facts[("founder", company.id)] = founder.id
        facts[("headquarters", company.id)] = rng.choice(by_kind["city"]).id
    for i, person in enumerate(people):
        facts[("born_in", person.id)] = rng.choice(by_kind["city"]).id
        facts[("alma_mater", person.id)] = rng.choice(by_kind["university"]).id
        if i > 0:  # a mentor comes shortly before in the list: no cycles, no dominant ancestor
            facts[("mentor", person.id)] = rng.choice(people[max(0, i - MENTOR_WINDOW) : i]).id
    for uni in by_kind["university"]:
        facts[("university_city", uni.id)] = rng.choice(by_kind["city"]).id
    for city in by_kind["city"]:
        facts[("country", city.id)] = rng.choice(by_kind["country"]).id
        facts[("river", city.id)] = rng.choice(by_kind["river"]).id

    names = {e.id: e.name for e in entities}
    spare = list(word_iter)
    documents = [
        Document(id=e.id, title=e.name, text=_entity_text(rng, facts, e, names, spare)) for e in entities
    ]
    documents += [_distractor(rng, i, by_kind, spare.pop()) for i in range(n_distractors)]
    order = sorted(range(len(documents)), key=lambda i: _doc_order(seed, documents[i].id))
    return World(
        seed=seed,
        n_entities=n_entities,
        entities=tuple(entities),
        facts=MappingProxyType(facts),
        documents=tuple(documents[i] for i in order),
    )


def _doc_order(seed: int, doc_id: str) -> int:
    """Shuffle key of a document in the collection (so kinds are interleaved, deterministically)."""
    return rng_for("doc-order", seed, doc_id).getrandbits(64)


def build_encyclopedia(seed: int = 0, n_entities: int = DEFAULT_ENTITIES) -> list[Document]:
    """The encyclopedia documents (entity pages and distractors) for ``seed`` and ``n_entities``."""
    return list(build_world(seed, n_entities).documents)


def encyclopedia_table(seed: int = 0, n_entities: int = DEFAULT_ENTITIES) -> pa.Table:
    """The encyclopedia of ``seed`` and ``n_entities`` as a ``document.v1`` table, in collection order."""
    rows = [{"doc_id": d.id, "title": d.title, "text": d.text} for d in build_encyclopedia(seed, n_entities)]
    return schemas.DOCUMENT.from_rows(rows)
