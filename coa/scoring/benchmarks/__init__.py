"""One scorer per benchmark, chosen by the benchmark, named in the results.

A reader puts an evaluation's number beside a leaderboard's only when both were scored by the same
rule. Each scorer here is one benchmark's published rule (``published=True``) or, for task sets
with none (the synthetic families, plain files), the project's own rule; its name and version go
into every ``eval.v1`` row (``scorer``, ``scorer_version``), ``metrics.json`` and the report. A
published rule runs the publisher's own grader package, never a rewrite of it; ``ScorerInfo.package``
names it with its installed version, in ``metrics.json`` and beside each number of ``coa score``
(:mod:`.publishers`).

=====================  =========================================  ===========================================
scorer                 benchmarks                                  rule
=====================  =========================================  ===========================================
``gaia``               GAIA                                        :mod:`.gaia`: numbers as floats, lists per
                                                                   element, strings without spaces/punctuation
``simple-evals-        BrowseComp                                  :mod:`.graders`: simple-evals' grader
browsecomp``                                                       (its template and parser, its package)
``hle-browsecomp-      Humanity's Last Exam                        :mod:`.graders`: HLE's judge prompt as
template``                                                         simple-evals' BrowseComp grader carries it
``simple-evals-        SimpleQA                                    :mod:`.graders`: simple-evals' grader, A
simpleqa``
``livecodebench``      LiveCodeBench (v4, v5, …)                   :mod:`.livecodebench`: LCB's own
                                                                   ``check_correctness`` in the sandbox
``afm-math-verify``    AIME 24/25, AMC 23, MATH-500, OlympiadBench math-verify as AFM's reward code uses it
``afm-mhqa-em``        NQ, HotpotQA, TriviaQA, PopQA, 2Wiki, …     AFM's ``mhqa_eval``: EM of the first ``|``
                                                                   answer (its published numbers)
``coa-web``            other web sets (WebWalker, plain files)    exact match, else the LLM judge (AFM's
                                                                   prompt), else token F1 >= 0.8
``coa-qa-em``          other multi-hop sets (synthetic)            EM of every ``|`` answer (AFM's train rule)
``coa-math``           other math sets (synthetic)                 :func:`coa.scoring.check_math`
``coa-code-tests``     other code sets (synthetic)                 every test passes in the sandbox
=====================  =========================================  ===========================================

:func:`benchmark_of` recognises a benchmark from a ``task.v1`` row: the importer records the file
stem (or the configured name) as ``source`` and keeps a file's ``data_source`` in ``metadata``; both
are read, case-insensitively. :func:`scorer_for` then picks the scorer; a config can name one per
benchmark (``evaluate.scorers``). A benchmark whose rule needs an LLM grader (BrowseComp, HLE) is
scored by ``coa-web`` when no judge is configured, and the choice carries a ``note`` saying the
number is not the benchmark's rule.

Training and RL rewards do not come from here: they keep :func:`coa.scoring.score_answer` (see
:mod:`coa.rl.rewards`), so changing how a benchmark is reported never changes what a model learns.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from coa.errors import UserError
from coa.scoring.benchmarks.publishers import LIVECODEBENCH, MATH_VERIFY, SIMPLE_EVALS, package_label

__all__ = [
    "SCORERS",
    "Choice",
    "ScorerInfo",
    "Verdict",
    "benchmark_of",
    "score_task",
    "scorer_for",
]


@dataclasses.dataclass(frozen=True)
class ScorerInfo:
    """What a scorer is: the name and version results record, and the rule in one line."""

    name: str
    version: str
    rule: str
    published: bool
    """True when this is the benchmark's own published rule (numbers comparable with its leaderboard)."""
    package: str | None = None
    """The publisher's grader package and its installed version (``"nvidia-simple-evals 26.3"``), or
    None for the project's own rules."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One scored answer."""

    correct: bool
    value: float
    detail: str
    scorer: ScorerInfo


ScoreFn = Callable[[Mapping[str, Any], str, Any], tuple[bool, float, str]]


@dataclasses.dataclass(frozen=True)
class Scorer:
    """A scoring rule: its identity, the task families it applies to, whether it needs a judge."""

    info: ScorerInfo
    families: tuple[str, ...]
    needs_judge: bool
    fn: ScoreFn

    def score(self, task: Mapping[str, Any], prediction: str | None, judge: Any = None) -> Verdict:
        if prediction is None or not prediction.strip():
            return Verdict(False, 0.0, "no answer", self.info)
        correct, value, detail = self.fn(task, prediction, judge)
        return Verdict(correct, value, detail, self.info)


@dataclasses.dataclass(frozen=True)
class Choice:
    """The scorer a benchmark gets, and a note when it is not the benchmark's own rule."""

    scorer: Scorer
    benchmark: str | None
    note: str | None = None


# -- the scorers ------------------------------------------------------------------------------


def _golds(task: Mapping[str, Any]) -> list[str]:
    return [str(g) for g in (task.get("gold_answers") or [])]


def _gaia(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
    from coa.scoring.benchmarks.gaia import gaia_match

    correct, rule, gold = gaia_match(prediction, _golds(task))
    detail = f"gaia {rule} rule" + (f", gold={gold!r}" if gold is not None else "")
    return correct, float(correct), detail


def _grader(name: str) -> ScoreFn:
    def fn(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
        from coa.scoring.benchmarks.graders import describe, grade

        if not hasattr(judge, "complete"):
            raise UserError(f"the {name} grader needs an LLM judge (evaluate.judge: an endpoint)")
        result = grade(judge, name, str(task.get("question") or ""), prediction, _golds(task))
        tag = f"{getattr(judge, 'model', 'judge')}/simple-evals {name}"
        return result.verdict, float(result.verdict), describe(result, tag)

    return fn


def _livecodebench(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
    from coa.scoring.benchmarks.livecodebench import run_lcb

    if not task.get("test_cases"):
        return False, 0.0, "no tests"
    result = run_lcb(prediction, task["test_cases"])
    return result.passed, float(result.passed), result.detail


def _afm_math(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
    from coa.scoring.math import afm_math_verify

    equal, reason = afm_math_verify(prediction, _golds(task))
    return equal, float(equal), f"math-verify (AFM): {reason}"


def _qa(mode: str) -> ScoreFn:
    def fn(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
        from coa.scoring import score_answer

        s = score_answer(prediction, _golds(task), "mhqa", mhqa_mode=mode)  # type: ignore[arg-type]
        return s.correct, s.value, f"{s.method} {s.detail}".strip()

    return fn


def _afm_mhqa(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
    from coa.scoring.benchmarks.afm_qa import mhqa_eval_match

    correct, detail = mhqa_eval_match(prediction, _golds(task))
    return correct, float(correct), f"mhqa_eval EM, {detail}"


def _coa_web(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
    from coa.scoring import score_answer

    s = score_answer(prediction, _golds(task), "web", judge=judge, question=task.get("question"))
    # whether the judge's verdict came from the response cache is not part of the row: a rerun that
    # replays cached verdicts must give the same rows
    return s.correct, s.value, f"{s.method} {s.detail.replace(' (cached)', '')}".strip()


def _coa_math(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
    from coa.scoring import score_answer

    s = score_answer(prediction, _golds(task), "math")
    return s.correct, s.value, f"{s.method} {s.detail}".strip()


def _coa_code(task: Mapping[str, Any], prediction: str, judge: Any) -> tuple[bool, float, str]:
    from coa.scoring.code import program_and_tests
    from coa.scoring.runs import SCORING_SANDBOX
    from coa.tools.code import run_tests
    from coa.tools.harness_pool import shared_pool

    if not task.get("test_cases"):
        return False, 0.0, "no tests"
    program, tests = program_and_tests(prediction, task["test_cases"])
    report = run_tests(program, tests, fail_fast=True, pool=shared_pool(SCORING_SANDBOX))
    return report.all_passed, float(report.all_passed), f"{report.passed}/{report.total} tests passed"


def _scorer(name: str, version: str, rule: str, published: bool, families: tuple[str, ...], fn: ScoreFn,
            needs_judge: bool = False, package: str | None = None) -> Scorer:  # fmt: skip
    label = package_label(package) if package else None
    return Scorer(ScorerInfo(name, version, rule, published, label), families, needs_judge, fn)


SCORERS: dict[str, Scorer] = {
    s.info.name: s
    for s in (
        _scorer(
            "gaia",
            "1",
            "GAIA question scorer: numbers ($ % , removed) as floats; lists split on , ; "
            "compared per element; strings without whitespace and punctuation, lower-cased",
            True,
            ("web",),
            _gaia,
        ),  # fmt: skip
        _scorer(
            "simple-evals-browsecomp",
            "1",
            "simple-evals' BrowseComp grader, run from its package: its GRADER_TEMPLATE as the one user "
            "message, its parser (first 'correct: (yes|no)', case-sensitive; no match is no)",
            True,
            ("web",),
            _grader("browsecomp"),
            needs_judge=True,
            package=SIMPLE_EVALS,
        ),  # fmt: skip
        _scorer(
            "hle-browsecomp-template",
            "1",
            "HLE's judge prompt as simple-evals' BrowseComp GRADER_TEMPLATE carries it (from HLE's "
            "run_judge_results.py), read by BrowseComp's parser; not HLE's structured-output call, "
            "which no package ships",
            True,
            ("web", "math"),
            _grader("hle"),
            needs_judge=True,
            package=SIMPLE_EVALS,
        ),  # fmt: skip
        _scorer(
            "simple-evals-simpleqa",
            "1",
            "simple-evals' SimpleQA grader, run from its package: its GRADER_TEMPLATE, its parser "
            "(first A|B|C; no match is C); correct is A",
            True,
            ("web", "mhqa"),
            _grader("simpleqa"),
            needs_judge=True,
            package=SIMPLE_EVALS,
        ),  # fmt: skip
        _scorer(
            "livecodebench",
            "2",
            "LiveCodeBench's check_correctness run from its package inside the sandbox: its code "
            "extraction (last block), its run_test (6 s per test, stdin as a text stream, tuples as "
            "lists), its process and global timeout; every test must pass",
            True,
            ("code",),
            _livecodebench,
            package=LIVECODEBENCH,
        ),  # fmt: skip
        _scorer(
            "afm-math-verify",
            "2",
            "math-verify as AFM's reward code uses it: parse the whole answer (no length limit), "
            "string match, else verify against \\boxed{gold}; 5 s to parse, 5 s to verify",
            True,
            ("math",),
            _afm_math,
            package=MATH_VERIFY,
        ),  # fmt: skip
        _scorer(
            "afm-mhqa-em",
            "1",
            "AFM mhqa_eval: SQuAD-normalised exact match of the first |-separated answer against any gold",
            True,
            ("mhqa",),
            _afm_mhqa,
        ),  # fmt: skip
        _scorer(
            "coa-web",
            "1",
            "project rule: normalised exact match, else the LLM judge (AFM-style "
            "prompt) when configured, else token F1 >= 0.8",
            False,
            ("web",),
            _coa_web,
        ),  # fmt: skip
        _scorer(
            "coa-qa-em",
            "1",
            "project rule: normalised exact match of every |-separated answer",
            False,
            ("mhqa",),
            _qa("all"),
        ),  # fmt: skip
        _scorer(
            "coa-math",
            "1",
            "project rule: \\boxed extraction + math-verify + numeric tolerance",
            False,
            ("math",),
            _coa_math,
        ),  # fmt: skip
        _scorer(
            "coa-code-tests",
            "1",
            "project rule: every test passes in the sandbox (stdin tests: stripped lines equal)",
            False,
            ("code",),
            _coa_code,
        ),  # fmt: skip
    )
}

FAMILY_DEFAULT = {"web": "coa-web", "mhqa": "coa-qa-em", "math": "coa-math", "code": "coa-code-tests"}

# benchmark → scorer; a benchmark is recognised by a pattern of its source name or data_source
_BENCHMARKS: tuple[tuple[str, str, re.Pattern[str]], ...] = tuple(
    (bench, scorer, re.compile(pattern))
    for bench, scorer, pattern in (
        ("gaia", "gaia", r"gaia"),
        ("browsecomp", "simple-evals-browsecomp", r"browse_?comp"),
        ("hle", "hle-browsecomp-template", r"(?:^|[^a-z])hle(?:[^a-z]|$)|humanity'?s?_?last_?exam"),
        ("simpleqa", "simple-evals-simpleqa", r"simple_?qa"),
        ("livecodebench", "livecodebench", r"livecodebench|(?:^|[^a-z])lcb"),
        ("aime", "afm-math-verify", r"aime"),
        ("amc", "afm-math-verify", r"(?:^|[^a-z])amc"),
        ("math500", "afm-math-verify", r"math[-_]?500"),
        ("olympiadbench", "afm-math-verify", r"olympiad"),
        ("math", "afm-math-verify", r"^math$|^hendrycks_math"),
        ("mhqa", "afm-mhqa-em",
         r"^(?:nq|natural_questions|triviaqa|tq|popqa|hotpotqa|2wikimultihopqa|musique|bamboogle)(?:[-_].*)?$"),
    )
)  # fmt: skip


def _data_source(metadata: Mapping[str, Any] | str | None) -> str | None:
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else None
        except json.JSONDecodeError:
            return None
    if isinstance(metadata, Mapping):
        value = metadata.get("data_source")
        return str(value) if value else None
    return None


def benchmark_of(source: str, metadata: Mapping[str, Any] | str | None = None) -> tuple[str, str] | None:
    """``(benchmark, scorer name)`` a task row's ``source`` / ``metadata.data_source`` names, else None."""
    names = [n.lower() for n in (_data_source(metadata), source) if n]
    for name in names:
        for bench, scorer, pattern in _BENCHMARKS:
            if pattern.search(name):
                return bench, scorer
    return None


def scorer_for(
    source: str,
    family: str,
    metadata: Mapping[str, Any] | str | None = None,
    *,
    judge: bool = False,
    overrides: Mapping[str, str] | None = None,
) -> Choice:
    """The scorer of a task of ``family`` from benchmark ``source`` (see the module docstring).

    ``judge``: whether an LLM judge is configured; ``overrides``: benchmark source → scorer name.
    """
    if overrides and source in overrides:
        name = overrides[source]
        if name not in SCORERS:
            known = ", ".join(SCORERS)
            raise UserError(f"evaluate.scorers[{source!r}]: unknown scorer {name!r}; known: {known}")
        scorer = SCORERS[name]
        if family not in scorer.families:
            fits = ", ".join(n for n, s in SCORERS.items() if family in s.families)
            raise UserError(
                f"evaluate.scorers[{source!r}]: scorer {name} scores {'/'.join(scorer.families)} tasks, "
                f"not {family}; pick one of: {fits}"
            )
        if scorer.needs_judge and not judge:
            raise UserError(
                f"evaluate.scorers[{source!r}]: {name} needs an LLM judge: configure evaluate.judge"
            )
        return Choice(scorer, source)
    found = benchmark_of(source, metadata)
    default = SCORERS[FAMILY_DEFAULT[family]] if family in FAMILY_DEFAULT else None
    if default is None:
        raise UserError(f"no scorer for family {family!r} (task set {source!r})")
    if found is None:
        return Choice(default, None)
    bench, name = found
    scorer = SCORERS[name]
    if family not in scorer.families:
        return Choice(default, bench, f"{bench} tasks of family {family} are scored by {default.info.name}")
    if scorer.needs_judge and not judge:
        return Choice(
            default,
            bench,
            f"{bench}'s published rule is an LLM grader ({name}); no judge is configured (evaluate.judge), "
            f"so these numbers use {default.info.name} and are not comparable with its leaderboard",
        )
    return Choice(scorer, bench)


def score_task(
    task: Mapping[str, Any],
    prediction: str | None,
    *,
    judge: Any = None,
    overrides: Mapping[str, str] | None = None,
) -> Verdict:
    """Score ``prediction`` for a ``task.v1`` row with the scorer its benchmark gets."""
    choice = scorer_for(
        str(task["source"]),
        str(task["family"]),
        task.get("metadata"),
        judge=judge is not None,
        overrides=overrides,
    )
    return choice.scorer.score(task, prediction, judge)
