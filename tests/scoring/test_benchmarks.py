"""Per-benchmark scorers: conformance golden files, the registry, and each rule's edge cases.

Golden files (``tests/scoring/golden/``): ``gaia_cases.jsonl`` (rewritings of the 103 GAIA dev
answers with GAIA's verdict, built by :mod:`tests.scoring.gaia_cases`) and ``answer_cases.jsonl`` (NQ
and AIME rewritings, :mod:`tests.scoring.answer_cases`). The publishers' graders side by side with
ours: ``test_graders.py`` (BrowseComp, HLE, SimpleQA), ``test_livecodebench.py``, ``test_afm_math.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coa.errors import UserError
from coa.scoring.benchmarks import SCORERS, benchmark_of, score_task, scorer_for
from coa.scoring.benchmarks.gaia import gaia_verdict
from coa.scoring.benchmarks.livecodebench import run_lcb
from coa.scoring.math import afm_math_verify
from tests.scoring.gaia_cases import build_cases, fixture_answers, old_scorer_disagreements, read_golden
from tests.tools.support import requires_sandbox

GOLDEN = Path(__file__).resolve().parent / "golden"


# -- GAIA ---------------------------------------------------------------------------------------


def test_gaia_golden_file_is_built_from_the_fixture(afm_fixtures: Path) -> None:
    cases = build_cases(fixture_answers(afm_fixtures / "gaia_dev_103.json"))
    assert cases == read_golden(), "regenerate with `python -m tests.scoring.gaia_cases` and review the diff"
    assert len({c["task_id"] for c in cases}) == 103 and len(cases) > 900
    assert {c["rule"] for c in cases} == {"number", "list", "list_length", "string", "empty"}


def test_gaia_scorer_agrees_with_gaias_rule_on_every_case() -> None:
    cases = read_golden()
    wrong = [
        c for c in cases if gaia_verdict(str(c["prediction"]), str(c["gold"])) != (c["expected"], c["rule"])
    ]
    assert wrong == []


def test_old_scorer_disagrees_with_gaia_where_the_issue_says() -> None:
    cases = read_golden()
    bad = old_scorer_disagreements(cases)
    print(f"old score_answer (web, no judge) vs GAIA's rule: {len(bad)}/{len(cases)} disagree")
    assert 0 < len(bad) < len(cases)
    issue = [("2.00", "2"), ("16000.0", "16000"), ("Indonesia;Myanmar", "Indonesia, Myanmar"),
             ("the 519", "519"), ("Braintree and Honolulu", "Braintree, Honolulu")]  # fmt: skip
    for prediction, gold in issue:
        assert any(c["prediction"] == prediction and c["gold"] == gold for c in bad), (prediction, gold)


@pytest.mark.parametrize(
    ("prediction", "gold", "verdict"),
    [
        ("2.00", "2", (True, "number")),
        ("$1,000", "1000", (True, "number")),
        ("16000.0", "16000", (True, "number")),
        ("the 519", "519", (False, "number")),
        ("Indonesia;Myanmar", "Indonesia, Myanmar", (True, "list")),
        ("Braintree and Honolulu", "Braintree, Honolulu", (False, "list_length")),
        ("7.0, 9", "7, 9", (True, "list")),
        ("Santa Clara , boston", "Santa Clara, Boston", (True, "list")),
        ("the castle!", "THE CASTLE", (True, "string")),
        ("Röntgen", "Röntgen", (True, "string")),
        ("Ro\u0308ntgen", "R\u00f6ntgen", (False, "string")),  # no Unicode normalisation in GAIA
        ("", "3", (False, "empty")),
        (None, "3", (False, "empty")),
    ],
)
def test_gaia_rule_examples(prediction: str | None, gold: str, verdict: tuple[bool, str]) -> None:
    assert gaia_verdict(prediction, gold) == verdict


# -- LLM graders (their conformance with simple-evals: tests/scoring/test_graders.py) ----------


def test_judge_benchmarks_without_a_judge_say_they_are_not_the_published_rule() -> None:
    choice = scorer_for("browsecomp", "web")
    assert choice.scorer.info.name == "coa-web" and choice.benchmark == "browsecomp"
    assert choice.note is not None and "not comparable" in choice.note
    assert scorer_for("browsecomp", "web", judge=True).scorer.info.name == "simple-evals-browsecomp"


# -- registry -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "family", "metadata", "scorer"),
    [
        ("gaia_dev_103", "web", None, "gaia"),
        ("webwalker_main", "web", None, "coa-web"),
        ("browsecomp", "web", None, "coa-web"),
        ("hle_test", "web", None, "coa-web"),
        ("nq_500", "mhqa", '{"data_source": "nq"}', "afm-mhqa-em"),
        ("my_questions", "mhqa", '{"data_source": "hotpotqa"}', "afm-mhqa-em"),
        ("aime24", "math", '{"data_source": "aime24"}', "afm-math-verify"),
        ("math500", "math", '{"data_source": "MATH500"}', "afm-math-verify"),
        ("OlympiadBench", "math", None, "afm-math-verify"),
        ("livecodebench_v5", "code", '{"data_source": "skywork_livecodebench_v5"}', "livecodebench"),
        ("synthetic-arithmetic", "math", None, "coa-math"),
        ("synthetic-multihop", "mhqa", None, "coa-qa-em"),
        ("synthetic-programming", "code", None, "coa-code-tests"),
        ("mathematics_quiz", "math", None, "coa-math"),
    ],
)
def test_scorer_chosen_by_the_benchmark(source: str, family: str, metadata: str | None, scorer: str) -> None:
    assert scorer_for(source, family, metadata).scorer.info.name == scorer


def test_config_overrides_are_checked() -> None:
    assert scorer_for("my_set", "web", overrides={"my_set": "gaia"}).scorer.info.name == "gaia"
    with pytest.raises(UserError, match="unknown scorer"):
        scorer_for("my_set", "web", overrides={"my_set": "nope"})
    with pytest.raises(UserError, match="scores code tasks, not web"):
        scorer_for("my_set", "web", overrides={"my_set": "livecodebench"})
    with pytest.raises(UserError, match="needs an LLM judge"):
        scorer_for("my_set", "web", overrides={"my_set": "hle-browsecomp-template"})
    assert benchmark_of("x", {"data_source": "aime25"}) == ("aime", "afm-math-verify")
    assert all(s.info.version and s.info.rule for s in SCORERS.values())


# -- math and QA --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "gold", "equal"),
    [
        ("\\boxed{204}", "204", True),
        ("204", "204", True),
        ("\\boxed{27}", "27.0", True),
        ("\\boxed{\\frac{1}{2}}", "0.5", True),
        ("\\boxed{(3, \\frac{\\pi}{2})}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("\\boxed{205}", "204", False),
        ("no idea", "204", False),
    ],
)
def test_afm_math_verify(answer: str, gold: str, equal: bool) -> None:
    assert afm_math_verify(answer, [gold])[0] is equal


def test_nq_is_scored_on_the_first_answer_as_afm_mhqa_eval() -> None:
    task = {"source": "nq_500", "family": "mhqa", "gold_answers": ["Wilhelm Conrad Röntgen"],
            "metadata": '{"data_source": "nq"}'}  # fmt: skip
    assert score_task(task, "wilhelm conrad röntgen | Marie Curie").correct
    assert not score_task(task, "Marie Curie | Wilhelm Conrad Röntgen").correct
    synthetic = dict(task, source="synthetic-multihop", metadata="{}")
    assert not score_task(synthetic, "wilhelm conrad röntgen | Marie Curie").correct  # every part must match


# -- LiveCodeBench ------------------------------------------------------------------------------


STDIN_TESTS = {"kind": "stdin", "stdin": ["5\n2 3 5 10 12\n", "1\n7\n"], "expected_output": ["32\n", "7\n"],
               "functional": None, "fn_name": None, "starter_code": None}  # fmt: skip
FUNCTIONAL_TESTS = {"kind": "functional", "stdin": None, "expected_output": None, "fn_name": "double",
                    "functional": "result = Solution().double(21)\nassert result == 42\n",
                    "starter_code": None}  # fmt: skip


@pytest.mark.sandbox
@requires_sandbox
def test_lcb_stdin_and_functional_semantics_in_the_sandbox() -> None:
    ok = "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```"
    assert run_lcb(ok, STDIN_TESTS).passed
    wrong = run_lcb("n = int(input())\nprint(n)", STDIN_TESTS)
    assert not wrong.passed and wrong.results == (-2,) and wrong.reason.startswith("Wrong answer")
    slow = run_lcb("import time\ntime.sleep(30)", STDIN_TESTS)
    assert not slow.passed and slow.results == (-3,) and slow.reason == "Time Limit Exceeded"
    assert not run_lcb("print(", STDIN_TESTS).passed
    assert run_lcb("class Solution:\n    def double(self, x):\n        return 2 * x", FUNCTIONAL_TESTS).passed
    assert run_lcb("def double(x):\n    return 2 * x", FUNCTIONAL_TESTS).passed  # LCB calls a top-level fn
    bad = run_lcb("class Solution:\n    def double(self, x):\n        return x", FUNCTIONAL_TESTS)
    assert not bad.passed and bad.reason == "Wrong Answer"
    task = {"source": "livecodebench_v5", "family": "code", "test_cases": STDIN_TESTS, "metadata": "{}"}
    verdict = score_task(task, ok)
    assert verdict.correct and verdict.scorer.name == "livecodebench" and "2/2 tests run" in verdict.detail
    assert verdict.scorer.package == "nvidia-livecodebench 26.3"


# -- NQ and AIME golden cases -------------------------------------------------------------------


def test_nq_and_aime_golden_cases(afm_fixtures: Path) -> None:
    from tests.scoring import answer_cases

    cases = answer_cases.from_fixtures(afm_fixtures)
    assert cases == answer_cases.read_golden(), "regenerate with `python -m tests.scoring.answer_cases`"
    wrong = []
    for c in cases:
        scorer = SCORERS["afm-mhqa-em" if c["benchmark"] == "nq" else "afm-math-verify"]
        verdict = scorer.score(
            {"gold_answers": c["golds"], "source": c["benchmark"], "family": ""}, c["prediction"]
        )
        if verdict.correct != c["expected"]:
            wrong.append((c["benchmark"], c["task"], c["rewrite"], c["prediction"], verdict.detail))
    assert wrong == [] and {c["benchmark"] for c in cases} == {"nq", "aime24"}
