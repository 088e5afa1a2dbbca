"""Multi-hop family: the encyclopedia states every fact once, and questions parse back to chains."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa.synthetic import (
    Document,
    build_encyclopedia,
    build_world,
    encyclopedia,
    generate,
    hop_query,
    multihop,
)

WORLD = build_world(0, 120)


def test_encyclopedia_is_deterministic_and_well_formed() -> None:
    docs = build_encyclopedia(0, 120)
    assert docs == build_encyclopedia(0, 120)
    assert docs != build_encyclopedia(1, 120)
    assert all(isinstance(d, Document) and d.id and d.title and d.text for d in docs)
    assert len({d.id for d in docs}) == len(docs)
    assert sum(d.id.startswith("event-") for d in docs) >= 120 // 3  # distractors
    assert len(WORLD.entities) == 120
    assert {e.kind for e in WORLD.entities} == set(encyclopedia.KINDS)


def test_names_are_unique_syllable_words() -> None:
    syllable_word = re.compile("(?:" + "|".join(encyclopedia.SYLLABLES) + "){2,3}")
    names = [e.name for e in WORLD.entities]
    assert len(set(names)) == len(names)
    words = []
    for e in WORLD.entities:
        core = e.name.split()
        if e.kind == "person":
            assert len(core) == 2
            words += core
        else:
            words.append(core[0])
    assert len(set(words)) == len(words)
    assert all(syllable_word.fullmatch(w.lower()) for w in words)


def test_each_fact_is_stated_in_the_subject_document_only() -> None:
    docs = {d.id: d for d in WORLD.documents}
    for (relation, subject_id), object_id in WORLD.facts.items():
        subject, obj = WORLD.by_id[subject_id], WORLD.by_id[object_id]
        rel = encyclopedia.RELATIONS[relation]
        assert (subject.kind, obj.kind) == (rel.subject, rel.object)
        text = docs[subject_id].text
        assert any(s.format(s=subject.name, o=obj.name) in text for s in rel.sentences), (relation, text)


def test_every_chain_and_phrasing_round_trips() -> None:
    for hops in (2, 3):
        for chain in multihop.chains(hops):
            starts = [e for e in WORLD.of_kind(encyclopedia.RELATIONS[chain[0]].subject)]
            start = next(e for e in starts if _resolves(e.name, list(chain)))
            for variant in range(len(encyclopedia.RELATIONS[chain[-1]].questions)):
                question = multihop.render_question(start.name, chain, variant)
                assert multihop.parse_question(question) == multihop.structure_of(start.name, chain, variant)


def _resolves(start: str, chain: list[str]) -> bool:
    try:
        WORLD.resolve(start, chain)
    except KeyError:
        return False
    return True


@given(seed=st.integers(min_value=0, max_value=10_000), split=st.sampled_from(["train", "heldout"]))
@settings(max_examples=15, deadline=None)
def test_parse_recovers_generated_structure_and_gold(seed: int, split: str) -> None:
    table = generate("multihop", 30, seed=seed, split=split, encyclopedia_size=120)
    for row in table.to_pylist():
        meta = json.loads(row["metadata"])
        structure = multihop.parse_question(row["question"])
        assert structure == meta["structure"]
        path = WORLD.resolve(structure["start"], structure["relations"])
        assert path == meta["path"]
        assert row["gold_answers"] == [path[-1]["object"]]
        assert structure["hops"] in (2, 3)


def test_both_hop_counts_and_all_final_relations_appear() -> None:
    table = generate("multihop", 300, seed=0, encyclopedia_size=120)
    structures = [json.loads(m)["structure"] for m in table["metadata"].to_pylist()]
    assert {s["hops"] for s in structures} == {2, 3}
    objects = {r.object for r in encyclopedia.RELATIONS.values()}
    can_be_last = {name for name, r in encyclopedia.RELATIONS.items() if r.subject in objects}
    assert {s["template"] for s in structures} == can_be_last


def test_heldout_starts_from_entities_train_never_starts_from() -> None:
    train = generate("multihop", 200, seed=0, split="train", encyclopedia_size=120)
    heldout = generate("multihop", 40, seed=9, split="heldout", encyclopedia_size=120)

    def starts(table: object) -> set[str]:
        return {json.loads(m)["structure"]["start"] for m in table["metadata"].to_pylist()}  # type: ignore[index]

    assert not starts(train) & starts(heldout)


def test_hop_query_is_a_single_hop_question() -> None:
    assert hop_query("founder", "Kelo Corp") == "Who founded Kelo Corp?"
    assert multihop.parse_question("In which country is the birthplace of the founder of Kelo Corp?") == {
        "template": "country",
        "variant": 0,
        "start": "Kelo Corp",
        "relations": ["founder", "born_in", "country"],
        "hops": 3,
    }


@pytest.mark.parametrize(
    "question",
    [
        "Who founded the Roman Empire in 27 BC?",
        "Who was the mentor of ?",
        "Where was the founder of kelo born?",
    ],
)
def test_unknown_question_is_rejected(question: str) -> None:
    with pytest.raises(ValueError):
        multihop.parse_question(question)
