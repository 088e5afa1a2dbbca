"""Decontamination against benchmark task sets: question overlap, answer + partial overlap,
benchmark answers in observations, and the real GAIA dev questions as a benchmark."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from coa.curate.config import DecontamConfig
from coa.curate.decontam import BenchmarkIndex
from coa.curate.text import normalize
from tests.curate.rows import bench_table, gaia_table, no_gate, question, run, run_curate, table

CLOWN_Q = (
    "According to the regional survey of the Pelican Bay reef, which volunteer diving club first "
    "reported the nonnative clownfish colony near the old lighthouse pier before the year 2020?"
)
SUM_Q = "What is the sum of the ages of the three founders of the Velmora chess circle in 1950?"
INSTITUTE_Q = "Which organisation published the 2019 report on ethical guidelines for archival robotics?"


@pytest.fixture
def bench() -> pa.Table:
    return bench_table(
        [
            ("bench:clown", CLOWN_Q, ["Coral Seekers Club"]),
            ("bench:sum", SUM_Q, ["17"]),
            ("bench:inst", INSTITUTE_Q, ["Ada Lovelace Institute"]),
            ("bench:short", "Who wrote Hamlet?", ["William Shakespeare"]),
        ]
    )


def test_question_overlap_and_short_exact_match(tmp_path: Path, bench: pa.Table) -> None:
    rows = [
        run(
            "wrapped",
            "Please answer carefully. " + CLOWN_Q.upper() + " Cite your sources.",
            gold=("x",),
            answer="x",
        ),
        run("short", "who wrote HAMLET", gold=("x",), answer="x"),
        run("clean", question(1)),
    ]
    _, sink = run_curate([table(rows)], no_gate(), tmp_path, benchmarks={"mini": bench})
    assert sink.reasons() == {"wrapped": "contaminated_question", "short": "contaminated_question"}
    details = {q["row_key"]: q["detail"] for q in sink.rejected()}
    assert "'mini'" in details["wrapped"] and "bench:clown" in details["wrapped"]
    assert "bench:short" in details["short"] and "equals" in details["short"]


def test_same_answer_with_partial_overlap_is_contaminated(tmp_path: Path, bench: pa.Table) -> None:
    reworded = "Add up the ages of the three founders of the Velmora chess circle as of 1950."
    rows = [
        run("reworded", reworded, "17", gold=("17",)),
        run("same-answer-other-question", question(2), "17", gold=("17",)),
        run("overlap-other-answer", reworded, "42", gold=("42",), task_id="t:x"),
    ]
    _, sink = run_curate([table(rows)], no_gate(), tmp_path, benchmarks={"mini": bench})
    assert sink.reasons() == {"reworded": "contaminated_answer"}
    (q,) = sink.rejected()
    assert "'17'" in q["detail"] and "bench:sum" in q["detail"]


def test_observation_scan(tmp_path: Path, bench: pa.Table) -> None:
    leak = (
        "Forum dump: Q: Which organisation published the 2019 report on ethical guidelines for archival "
        "robotics? A: the Ada Lovelace Institute."
    )
    mention = "News: the Ada Lovelace Institute opened a new office."
    short = "Velmora census: 17 founders of the chess circle were listed."
    rows = [
        run("leak", question(3), calls=[("web_search", "x", leak, None)]),
        run("mention", question(4), calls=[("web_search", "y", mention, None)]),
        run("short", question(5), calls=[("web_search", "z", short, None)]),
        run(
            "own-answer",
            question(6),
            "Ada Lovelace Institute",
            gold=("Ada Lovelace Institute",),
            calls=[("web_search", "w", leak, None)],
        ),
    ]
    _, sink = run_curate([table(rows)], no_gate(), tmp_path, benchmarks={"mini": bench})
    assert sink.reasons() == {"leak": "contaminated_observation"}
    (q,) = sink.rejected()
    assert "ada lovelace institute" in q["detail"] and "bench:inst" in q["detail"] and "'mini'" in q["detail"]

    # the plain answer scan (no question context): a mention is enough, a short answer still is not
    plain = no_gate(decontam={"observation_question_overlap": 0.0})
    _, sink = run_curate([table(rows)], plain, tmp_path / "plain", benchmarks={"mini": bench})
    assert sink.reasons() == {"leak": "contaminated_observation", "mention": "contaminated_observation"}


def test_gaia_dev_questions_as_benchmark(tmp_path: Path, afm_fixtures: Path, bench: pa.Table) -> None:
    gaia = gaia_table(afm_fixtures)
    items = json.loads((afm_fixtures / "gaia_dev_103.json").read_text())
    picked = [items[0], items[5], items[20]]
    rows = [
        run("gaia0", "Task: " + picked[0]["question"].replace("USGS", "U.S.G.S."), gold=("x",), answer="x"),
        run("gaia5", picked[1]["question"].lower() + " Answer in one number.", gold=("x",), answer="x"),
        run("gaia20", picked[2]["question"], "beta geometric", gold=(str(picked[2]["answer"]),)),
    ]
    rows += [
        run(f"clean{i}", question(10 + i), observation=f"Result {i}: research notes about the diamond.")
        for i in range(20)
    ]
    benchmarks = {"gaia": gaia, "mini": bench}
    _, sink = run_curate([table(rows)], no_gate(), tmp_path, benchmarks=benchmarks)
    assert sink.reasons() == {f"gaia{k}": "contaminated_question" for k in (0, 5, 20)}
    details = {q["row_key"]: q["detail"] for q in sink.rejected()}
    for key, item in zip(("gaia0", "gaia5", "gaia20"), picked, strict=True):
        assert "'gaia'" in details[key] and item["task_id"] in details[key]
    # every GAIA question is found in the index, and no unrelated one
    index = BenchmarkIndex(DecontamConfig(), benchmarks)
    assert len(index) == len(items) + 4
    assert all(index.question_match(normalize(d["question"])) is not None for d in items)
    assert all(index.question_match(normalize(question(i))) is None for i in range(200))


def test_index_rejects_a_table_without_questions() -> None:
    with pytest.raises(ValueError, match="lacks column"):
        BenchmarkIndex(DecontamConfig(), {"bad": pa.table({"task_id": ["a"]})})


def test_benchmarks_load_from_task_artifacts(bench: pa.Table) -> None:
    import schemas
    from coa import io
    from coa.curate.decontam import load_benchmarks

    refs: list[io.ArtifactRef] = []
    for name in ("mini", "mini"):
        writer = io.Store().writer("tasks", name, {"n": len(refs)})
        writer.write_table("tasks", bench, schemas.TASK)
        refs.append(writer.commit())
    loaded = load_benchmarks([r.uri for r in refs])
    assert list(loaded) == ["mini", "mini#2"]
    assert loaded["mini"].column_names == ["task_id", "question", "gold_answers"]
    assert loaded["mini"].num_rows == bench.num_rows
