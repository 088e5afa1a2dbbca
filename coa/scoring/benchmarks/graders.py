"""BrowseComp's, SimpleQA's and HLE's LLM graders, run from simple-evals' own package.

The grader *is* the benchmark: a judge asked in other words, or read more leniently, gives other
numbers. So nothing here rewrites the grader. :func:`grade` calls the publisher's ``grade_sample``
(``nvidia-simple-evals``, :mod:`.publishers`) unchanged: it formats its own ``GRADER_TEMPLATE``,
sends it as the one user message (no system message), and reads the judge's reply with its own
parser. The only thing supplied is the judge model, in the place of simple-evals' ``grader_model``:
:meth:`coa.scoring.judge.LLMJudge.complete` (cached; temperature 0, as simple-evals' judge configs).

=================  ========================================  =========================================
grader             template                                   verdict (simple-evals' parser)
=================  ========================================  =========================================
``browsecomp``     ``browsecomp_eval.GRADER_TEMPLATE``        ``re.search(r"correct: (yes|no)")``, the
                                                              first match, case-sensitive; the group
                                                              (the fixed ``group(0)`` bug); no match
                                                              is ``no``
``hle``            the same template: simple-evals copied it  the same. HLE's own judge asks for the
                   from HLE's ``run_judge_results.py``        same fields as structured output; no
                                                              package ships it, so HLE is graded
                                                              through this template, named as such
``simpleqa``       ``simpleqa_eval.GRADER_TEMPLATE``          ``re.search(r"(A|B|C)")``, the first
                                                              letter; no match is ``C``; correct is
                                                              ``A``
=================  ========================================  =========================================

A reply the parser cannot read is graded as the publisher grades it (``no`` / ``C``), with no
retry: simple-evals does not retry either. ``Grade.reply`` keeps the judge's words for the audit
trail (``eval.v1`` ``score_detail``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine, Sequence
from types import ModuleType
from typing import Any, Protocol

from coa.scoring.benchmarks.publishers import SIMPLE_EVALS, grader_import

GRADERS: dict[str, str] = {
    "browsecomp": "BrowseCompEval",
    "hle": "BrowseCompEval",
    "simpleqa": "SimpleQAEval",
}
"""Grader name → the simple-evals eval class whose module's ``GRADER_TEMPLATE`` and whose
``grade_sample`` grade (``simple_evals.evals.browsecomp_eval`` / ``simpleqa_eval``)."""

CORRECT_LABEL = {"browsecomp": "yes", "hle": "yes", "simpleqa": "A"}


class ChatJudge(Protocol):
    """A grader model: one chat completion per call (:class:`coa.scoring.judge.LLMJudge` is one)."""

    model: str

    def complete(self, messages: list[dict[str, str]], attempt: int = 0) -> str: ...


@dataclasses.dataclass(frozen=True)
class Grade:
    """What the publisher's grader decided: the verdict, its label (``yes``/``no``, ``A``/``B``/``C``),
    the messages the judge was sent and its reply."""

    verdict: bool
    label: str
    messages: tuple[dict[str, str], ...]
    reply: str


class _GraderModel:
    """What simple-evals' ``grade_sample`` uses of its ``self``: an async ``grader_model(messages)``."""

    def __init__(self, judge: ChatJudge) -> None:
        self.judge = judge
        self.messages: list[dict[str, str]] = []
        self.reply = ""

    async def grader_model(self, messages: list[dict[str, str]]) -> str:
        self.messages = [dict(m) for m in messages]
        self.reply = str(self.judge.complete(self.messages))
        return self.reply


def _drive(coro: Coroutine[Any, Any, str]) -> str:
    """Run a coroutine that never suspends (ours do not) without an event loop: callable from
    any thread, inside or outside a running loop."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return str(stop.value)
    coro.close()
    raise RuntimeError("the grader awaited something other than the judge")


def grader_source(name: str) -> ModuleType:
    """The simple-evals module of grader ``name`` (imported here, where it is needed: it loads pandas)."""
    with grader_import(SIMPLE_EVALS):
        if GRADERS[name] == "SimpleQAEval":
            from simple_evals.evals import simpleqa_eval

            return simpleqa_eval
        from simple_evals.evals import browsecomp_eval

        return browsecomp_eval


def eval_class(name: str) -> Any:
    """The publisher's eval class of grader ``name`` (its ``grade_sample`` grades)."""
    return getattr(grader_source(name), GRADERS[name])


def grader_template(name: str) -> str:
    """The publisher's ``GRADER_TEMPLATE`` of grader ``name``."""
    return str(grader_source(name).GRADER_TEMPLATE)


def grade(judge: ChatJudge, name: str, question: str, response: str, gold_answers: Sequence[str]) -> Grade:
    """Grade ``response`` with the publisher's grader ``name`` (see the module docstring).

    Several golds are joined with `` | `` into the one ``correct_answer`` the template has room for.
    """
    eval_cls = eval_class(name)
    model = _GraderModel(judge)
    gold = " | ".join(gold_answers)
    label = _drive(eval_cls.grade_sample(model, question, gold, response))
    return Grade(label == CORRECT_LABEL[name], label, tuple(model.messages), model.reply)


def describe(grade_: Grade, tag: str) -> str:
    """One line for ``eval.v1`` ``score_detail``: the verdict and the start of the judge's reply."""
    reply = " ".join(grade_.reply.split())
    return f"grader {tag}: {grade_.label}; reply {reply[:160]!r}"


__all__ = [
    "CORRECT_LABEL", "GRADERS", "ChatJudge", "Grade", "describe", "eval_class", "grade", "grader_source",
    "grader_template",
]  # fmt: skip
