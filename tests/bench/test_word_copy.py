"""bench_word_copy: the teacher-forced FizzBuzz word probe."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from coa.model import TinyModelConfig, init_model, sft_corpus
from coa.synthetic import programming
from tests.bench.scripts import load_script
from tests.train.rows import arith_rows

PARAMS = {"a": 3, "b": 5, "word_a": "Zip", "word_b": "Pong"}
LEAD = "<plan>\nWrite and test a program.\n</plan>\n<think>\nWrite it.\n</think>\n<code>\n```py\n"


def load_bench() -> ModuleType:
    return load_script("bench_word_copy")


def question(params: dict[str, object]) -> str:
    return programming.render_question("fizzbuzz", params, "5\n", "1\n2\nZip\n4\nPong\n")


def test_the_prefix_is_the_teacher_text_up_to_the_first_printed_word() -> None:
    bench = load_bench()
    prefix = bench.teacher_prefix(LEAD, PARAMS)
    assert prefix.startswith(LEAD) and prefix.endswith("if i % 3 == 0 and i % 5 == 0:\n        print('")
    reference = programming.reference_solution("fizzbuzz", PARAMS)
    assert (prefix[len(LEAD) :] + "ZipPong')") in reference  # the probe's target follows the prefix
    assert bench.fizzbuzz_params(question(PARAMS)) == PARAMS
    assert (
        bench.fizzbuzz_params(
            "Read a word and print it. Read from standard input and write to standard output."
        )
        is None
    )
    fizzbuzz = [{"content": "sys"}, {"content": question(PARAMS)}, {"content": LEAD + "n = 1"}]
    rows = [
        {"family": "math", "messages": [{"content": "s"}, {"content": "Evaluate 1 + 2."}, {"content": "x"}]},
        {"family": "code", "messages": fizzbuzz},
    ]
    assert bench.lead_of(rows) == ("sys", LEAD)
    with pytest.raises(SystemExit, match="no FizzBuzz example"):
        bench.lead_of(rows[:1])


def test_the_summary_counts_both_and_first_words_per_split() -> None:
    bench = load_bench()
    probes = [
        bench.Probe("train", "q1", "Zip", "ZipPong", "ZipPong"),
        bench.Probe("train", "q2", "Fizz", "FizzBuzz", "FizzZap"),
        bench.Probe("heldout", "q3", "Ping", "PingZap", "FizzZap"),
    ]
    result = bench.summary(probes)
    assert result["train"] | {"most_frequent_output": None} == {
        "questions": 2, "both_words_right": 1, "first_word_right": 2, "most_frequent_output": None,
    }  # fmt: skip
    assert result["heldout"]["first_word_right"] == 0
    assert result["heldout"]["most_frequent_output"] == {"text": "FizzZap", "count": 1}


def test_a_tiny_student_is_probed_on_every_fizzbuzz_question(tmp_path: Path) -> None:
    bench = load_bench()
    tiny = TinyModelConfig(vocab_size=400, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2,
                           intermediate_size=64)  # fmt: skip
    model = init_model(sft_corpus(arith_rows(20, seed=0)), tiny, tmp_path / "model")
    other = {"a": 2, "b": 7, "word_a": "Fizz", "word_b": "Zap"}
    questions = {"train": [question(PARAMS), "Not a FizzBuzz question."], "heldout": [question(other)]}
    probes = bench.probe(model, "sys", LEAD, questions)
    assert [(p.split, p.wanted) for p in probes] == [("train", "ZipPong"), ("heldout", "FizzZap")]
    assert all(isinstance(p.got, str) for p in probes)
