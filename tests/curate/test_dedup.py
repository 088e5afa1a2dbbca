"""Exact and near-duplicate removal across tasks, the per-task cap, and the small dedup state."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from coa.curate.config import DedupConfig
from coa.curate.dedup import Deduplicator
from coa.curate.text import normalize
from tests.curate.rows import LONG_Q, no_gate, question, run, run_curate, table


def test_exact_duplicates_of_runs_and_of_questions(tmp_path: Path) -> None:
    rows = [
        run("a", LONG_Q, task_id="t1"),
        run("a-again", LONG_Q, task_id="t1", sample_index=1),  # same steps, collected twice
        run("b", "What is the capital city of Zorvakia?", task_id="t2"),
        run("b-copy", "what is the CAPITAL city of zorvakia", task_id="t3"),  # same question, new task id
        run("c", question(7), task_id="t4"),
    ]
    _, sink = run_curate([table(rows)], no_gate(dedup={"max_per_task": 5}), tmp_path)
    assert sink.reasons() == {"a-again": "exact_duplicate", "b-copy": "exact_duplicate"}
    details = {q["row_key"]: q["detail"] for q in sink.rejected()}
    assert "t2" in details["b-copy"]
    assert [r["run_id"] for r in sink.kept()] == ["a", "b", "c"]


def test_near_duplicate_paraphrase_removed_and_different_question_kept(tmp_path: Path) -> None:
    paraphrase = LONG_Q.replace("drafting", "writing")  # one word changed
    assert paraphrase != LONG_Q
    rows = [
        run("orig", LONG_Q, task_id="gaia-like:1"),
        run("para", paraphrase, task_id="other:9"),
        run("diff", question(3), task_id="other:10"),
    ]
    res, sink = run_curate([table(rows)], no_gate(), tmp_path)
    assert sink.reasons() == {"para": "near_duplicate"}
    (q,) = sink.rejected()
    assert "gaia-like:1" in q["detail"] and "Jaccard" in q["detail"]
    assert [r["run_id"] for r in sink.kept()] == ["orig", "diff"]
    assert res.stats.kept_tasks == 2


def test_cap_per_task_and_rejected_runs_do_not_take_a_slot(tmp_path: Path) -> None:
    calls = [[("web_search", f"query variant {k}", f"result {k}", None)] for k in range(4)]
    rows = [
        run("s0-wrong", LONG_Q, "Wrong", task_id="t", calls=calls[0]),
        run("s1", LONG_Q, task_id="t", calls=calls[1], sample_index=1),
        run("s2", LONG_Q, task_id="t", calls=calls[2], sample_index=2),
        run("s3", LONG_Q, task_id="t", calls=calls[3], sample_index=3),
    ]
    _, sink = run_curate([table(rows)], no_gate(dedup={"max_per_task": 2}), tmp_path)
    assert sink.reasons() == {"s0-wrong": "incorrect", "s3": "task_cap"}
    assert [r["run_id"] for r in sink.kept()] == ["s1", "s2"]


def test_dedup_state_is_small_and_unverified_lsh_also_works() -> None:
    questions = [normalize(question(i)) for i in range(300)]
    for verify in (True, False):
        d = Deduplicator(DedupConfig(verify=verify, max_per_task=None))
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for i, q in enumerate(questions):
            assert d.check(f"t{i}", q, i) is None, i
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        near = d.check("new", normalize(question(5).replace("holds", "keeps")), 10_000)
        assert near is not None and near.reason == "near_duplicate" and "t5" in near.detail
        assert d.kept_tasks == 300
        # hashes, one signature and the LSH band entries per kept task: a few KB, whatever the runs hold
        assert grown / 300 < 10_000 and d.approx_bytes() / 300 < 10_000
        assert 0.5 < d.approx_bytes() / grown < 2
