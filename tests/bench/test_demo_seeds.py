"""bench_demo_seeds: the demo's plan under several seeds, the spread of the held-out figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.scripts import REPO, load_script, run_bench


def load_bench() -> ModuleType:
    return load_script("bench_demo_seeds")


def test_the_spread_is_over_seeds_per_family() -> None:
    bench = load_bench()
    runs = {
        s: {"metrics": {"math": {"accuracy": a, "format_valid": 1.0}}, "sft_steps_per_min": 400.0}
        for s, a in ((0, 0.38), (1, 1.0), (2, 0.82))
    }
    text, summary = bench.table(runs)
    math = summary["math.accuracy"]
    assert (math["min"], math["max"]) == (0.38, 1.0) and math["mean"] == pytest.approx(0.7333, abs=1e-4)
    assert math["sd"] == pytest.approx(0.3189, abs=1e-4) and summary["math.format_valid"]["sd"] == 0.0
    assert "38%" in text and "seed 2" in text
    assert bench.seed_overrides(3, fixed_data=True) == ["student.tiny.seed=3", "sft.seed=3", "rl=null"]
    assert bench.seed_overrides(3, fixed_data=False)[0] == "synthetic.seed=3"


def test_quick_run_trains_one_student_per_seed(
    storage_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "seeds.json"
    record = run_bench("bench_demo_seeds", ["--quick", "--seeds", "0,1", "--json", str(out)])
    assert set(record["timings"]) == {f"seed {s} (its plan up to evaluate.after)" for s in (0, 1)}
    result = json.loads(out.read_text())["figures"]
    runs = result["runs"]
    assert set(runs) == {"0", "1"} and runs["0"]["evaluation"] != runs["1"]["evaluation"]
    assert all(r["sft_steps"] == 4 and r["sft_steps_per_min"] > 0 for r in runs.values())
    assert all(set(r["math_misses"]) <= set(load_bench().MISS_KINDS) for r in runs.values())
    assert all(set(r["multihop_misses"]) <= set(load_bench().HOP_MISS_KINDS) for r in runs.values())
    copies = runs["0"]["start_copies"]
    assert set(copies) == set(load_bench().START_KINDS)
    assert sum(c["questions"] for c in copies.values()) == runs["0"]["metrics"]["mhqa"]["n"]
    assert set(result["spread"]["all.accuracy"]["per_seed"]) == {"0", "1"}


def _episode(expression: str, printed: str) -> str:
    return (
        f"<plan>\n1. Expression: {expression}.\n</plan>\n"
        f"<code>\n```py\nresult = {expression}\nprint(result)\n```\n</code>\n"
        f"<observation>\n[STDOUT:BEGIN]\n{printed}\n[STDOUT:END]\n</observation>\n"
    )


@pytest.mark.parametrize(
    ("written", "printed", "answer", "kind"),
    [
        ("451 - 730 - 84", "-363", "\\boxed{-363}", "operator miscopied"),
        ("451 + 703 - 84", "1070", "\\boxed{1070}", "operand miscopied"),
        ("451 + 730", "1181", "\\boxed{1181}", "expression otherwise wrong"),
        ("451 + 730 - 84", "1097", "\\boxed{1079}", "printed value miscopied"),
        ("451 + 730 - 84", "1097", None, "printed value miscopied"),
        ("451 + 730 - 84", "1097", "\\boxed{1097}", "other"),
    ],
)
def test_a_math_miss_is_told_by_where_the_copy_went_wrong(
    written: str, printed: str, answer: str | None, kind: str
) -> None:
    bench = load_bench()
    question = "Find the value of 451 + 730 - 84."
    assert bench.classify_math_miss(question, _episode(written, printed), answer) == kind
    assert bench.classify_math_miss(question, "<think>\nno code\n</think>", answer) == "no program"


def test_math_misses_count_only_the_wrong_math_rows() -> None:
    bench = load_bench()
    questions = {"t1": "Evaluate 1 + 2 * 3.", "t2": "Evaluate 4 - 5 - 6.", "t3": "Evaluate 7 * 8 + 9."}

    def row(task: str, family: str, correct: bool, written: str, printed: str) -> dict[str, object]:
        text = _episode(written, printed)
        return {"task_id": task, "family": family, "correct": correct, "text": text, "prediction": printed}

    rows = [
        row("t1", "math", False, "1 + 2 + 3", "6"),
        row("t2", "math", False, "4 + 5 - 6", "3"),
        row("t3", "math", True, "7 * 8 + 9", "65"),
        row("c1", "code", False, "", ""),
    ]
    assert bench.math_misses(rows, questions) == {"operator miscopied": 2}
    text, _ = bench.table(
        {0: {"metrics": {"math": {"accuracy": 0.5, "format_valid": 1.0}}, "sft_steps_per_min": 1.0,
             "math_misses": {"operator miscopied": 2}}}
    )  # fmt: skip
    assert "seed 0: operator miscopied 2" in text


def _hops(*hops: tuple[str, str, str]) -> str:
    """A multi-hop episode: per hop a search, its observation, and the hop's statement."""
    return "".join(
        f"<web_search>\nWho was the mentor of {s}?\n</web_search>\n<observation>\n{doc}\n</observation>\n"
        f"<think>\nThe result states: ... So the mentor of {s} is {o}.\nHop 2 of 2.\n</think>\n"
        for s, o, doc in hops
    )


DOC_RIGE = "Rige Nugi was mentored by Rite Fozi. Rige Nugi attended Tobu University."
DOC_RITE = "The mentor of Rite Fozi was Dedo Veki."


@pytest.mark.parametrize(
    ("text", "prediction", "kind"),
    [
        (_hops(("Rige Nugi", "Rite Fozi", DOC_RIGE)), None, "no answer"),
        ("<think>\nThe chain ends at Rite Fozi.\n</think>", "Rite Fozi", "no search"),
        (_hops(("Rige Nugi", "Rige Nugi", DOC_RIGE)), "Rige Nugi", "subject restated as the object"),
        (_hops(("Rige Nugi", "Pela River", DOC_RIGE)), "Pela River", "object not in the observation"),
        (
            _hops(("Rige Nugi", "Rite Fozi", DOC_RIGE), ("Rite Fozi", "Rige Nugi", DOC_RITE)),
            "Rige Nugi",
            "object not in the observation",
        ),
        (
            _hops(("Rige Nugi", "Rite Fozi", DOC_RIGE), ("Rite Fozi", "Dedo Veki", DOC_RITE)),
            "Zipe",
            "answer not the chain's last object",
        ),
        (
            _hops(("Rige Nugi", "Rite Fozi", DOC_RIGE), ("Rite Fozi", "Dedo Veki", DOC_RITE)),
            "Dedo Veki",
            "other",
        ),
    ],
)
def test_a_multihop_miss_is_told_by_the_first_hop_that_went_wrong(
    text: str, prediction: str | None, kind: str
) -> None:
    question = "Who was the mentor of the mentor of Rige Nugi?"
    assert load_bench().classify_multihop_miss(question, text, prediction) == kind
    if kind not in ("no answer", "no search"):  # the question asks about another start entity
        other = "Who was the mentor of the mentor of Tula Works?"
        assert load_bench().classify_multihop_miss(other, text, prediction) == "start entity miscopied"


def test_multihop_misses_count_only_the_wrong_multihop_rows() -> None:
    bench = load_bench()
    restated = _hops(("Rige Nugi", "Rige Nugi", DOC_RIGE))
    rows = [
        {"task_id": "t1", "family": "mhqa", "correct": False, "text": restated, "prediction": "Rige Nugi"},
        {"task_id": "t1", "family": "mhqa", "correct": True, "text": restated, "prediction": "Rige Nugi"},
        {"task_id": "m1", "family": "math", "correct": False, "text": restated, "prediction": "Rige Nugi"},
        {"task_id": "t2", "family": "mhqa", "correct": False, "text": None, "prediction": None},
    ]
    questions = {"t1": "Who was the mentor of Rige Nugi?", "t2": "Who was the mentor of Tula Works?"}
    assert bench.multihop_misses(rows, questions) == {"no answer": 1, "subject restated as the object": 1}
    text, _ = bench.table(
        {0: {"metrics": {"mhqa": {"accuracy": 0.0, "format_valid": 1.0}}, "sft_steps_per_min": 1.0,
             "multihop_misses": {"no answer": 1}}}
    )  # fmt: skip
    assert "held-out multi-hop misses by kind\nseed 0: no answer 1" in text


class WordTokenizer:
    """One id per word (punctuation and spaces dropped)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        words = re.findall(r"\w+", text)
        return {"input_ids": [self.ids.setdefault(w, len(self.ids)) for w in words]}


def test_a_start_entity_is_told_by_whether_sft_ever_wrote_its_tokens() -> None:
    bench, tokenizer = load_bench(), WordTokenizer()
    content = (
        "<web_search>\nWho was the mentor of Rige Nugi?\n</web_search>\n"
        "<observation>\nTula Works makes clocks. Rite Fozi founded it.\n</observation>\n"
        "<answer>\nRite Fozi\n</answer>"
    )
    written = bench.written_token_ids(tokenizer, [{"messages": [{"role": "assistant", "content": content}]}])
    assert tokenizer(" Rige Nugi")["input_ids"][0] in written  # written in the search
    assert tokenizer("Tula")["input_ids"][0] not in written  # only read, in the observation
    miscopied = "<web_search>\nWho was the founder of Kubu Works?\n</web_search>\n"
    rows = [
        {"task_id": "t1", "family": "mhqa", "correct": False, "text": miscopied, "prediction": "Rite Fozi"},
        {"task_id": "t2", "family": "mhqa", "correct": True, "text": "", "prediction": "Rite Fozi"},
        {"task_id": "t3", "family": "mhqa", "correct": False, "text": miscopied, "prediction": "Rite Fozi"},
        {"task_id": "m1", "family": "math", "correct": False, "text": miscopied, "prediction": "3"},
    ]
    questions = {
        "t1": "Who was the mentor of the founder of Tula Works?",
        "t2": "Who was the mentor of the mentor of Rige Nugi?",
        "t3": "Who was the mentor of the mentor of Rige Nugi?",
        "m1": "What is 1 + 2?",
    }
    never, every = bench.START_KINDS
    assert bench.start_copies(rows, questions, tokenizer, written) == {
        never: {"questions": 1, "miscopied": 1},
        every: {"questions": 2, "miscopied": 1},
    }


def _fizzbuzz_question() -> tuple[str, str]:
    """A FizzBuzz question and its reference program."""
    from coa.synthetic import programming

    params = {"a": 3, "b": 5, "word_a": "Ping", "word_b": "Zap"}
    return programming.render_question("fizzbuzz", params, "5\n", "1\n2\nPing\n4\nZap\n"), (
        programming.reference_solution("fizzbuzz", params)
    )


@pytest.mark.parametrize(
    ("edit", "kind"),
    [
        (lambda p: p.replace("'Ping'", "'Pong'"), "words miscopied"),
        (lambda p: p.replace("% 5", "% 6"), "numbers miscopied"),
        (lambda p: p.replace("'Zap'", "'Buzz'").replace("% 3", "% 4"), "words and numbers miscopied"),
        (lambda p: "n = int(input())\nprint(sum(i for i in range(1, n) if i % 3 == 0 or i % 5 == 0))\n",
         "another problem's program"),
        (lambda p: p.replace("print(i)", "print(i + 1)"), "program otherwise wrong"),
        (lambda p: "", "no program"),
        (lambda p: "print((", "no program"),
        (lambda p: p, "other"),
    ],
)  # fmt: skip
def test_a_programming_miss_is_told_against_the_reference_program(edit: object, kind: str) -> None:
    bench = load_bench()
    question, reference = _fizzbuzz_question()
    program = edit(reference)  # type: ignore[operator]
    assert bench.classify_code_miss(question, f"```py\n{program}```" if program else "") == kind
    row = {
        "task_id": "t",
        "family": "code",
        "correct": False,
        "text": "",
        "prediction": f"```py\n{program}```",
    }
    assert bench.code_misses([row, {**row, "correct": True}], {"t": question}) == {kind: 1}
    assert bench.classify_code_miss("Write a poem.", f"```py\n{reference}```") == "other"
