"""BrowseComp, HLE and SimpleQA: our scorers against simple-evals' own graders, side by side.

The publisher's side is simple-evals' ``grade_sample`` run as simple-evals runs it (``asyncio.run``,
its ``grader_model`` replaced by a judge that gives a fixed reply); ours is ``score_task`` on a
``task.v1`` row with a judge giving the same reply. The replies are generated: every shape a judge
model produces (plain fields, any letter case, markdown, a ``<think>`` block that says the
opposite, a qualified value, JSON, code fences, an empty or truncated reply), so that each
leniency of a parser shows as a disagreement.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from coa.scoring.benchmarks import SCORERS, score_task, scorer_for
from coa.scoring.benchmarks.graders import eval_class, grade, grader_template
from coa.scoring.benchmarks.publishers import SIMPLE_EVALS, package_version

QUESTION = "Which years did the author's first trilogy span?"
GOLDS = ["1988-96"]
RESPONSE = "Explanation: the trilogy ran from 1988 to 1996.\nExact Answer: 1988-96\nConfidence: 80%"


class FakeJudge:
    model = "fake-grader"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.asked: list[list[dict[str, str]]] = []

    def complete(self, messages: list[dict[str, str]], attempt: int = 0) -> str:
        self.asked.append(messages)
        return self.reply


class PublisherSelf:
    """What simple-evals' ``grade_sample`` reads of its ``self``: ``grader_model``."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.asked: list[list[dict[str, str]]] = []

    async def grader_model(self, messages: list[dict[str, str]]) -> str:
        self.asked.append(messages)
        return self.reply


def publisher_grade(name: str, reply: str, question: str, gold: str, response: str) -> tuple[str, Any]:
    eval_cls = eval_class(name)
    model = PublisherSelf(reply)
    label = asyncio.run(eval_cls.grade_sample(model, question, gold, response))
    return label, model.asked


def browsecomp_replies() -> list[str]:
    """Judge replies of every shape (see the module docstring); a few hundred, all distinct."""
    names = ["correct", "Correct", "CORRECT", "**correct**", "**correct:**", "- correct", "### correct"]
    seps = [": ", ":", ":  ", " : ", ":\n"]
    values = ["yes", "no", "Yes", "NO", "**yes**", "yes.", "yes, mostly", "no (close)", "partially", "y"]
    replies = []
    for name, sep, value in itertools.product(names, seps, values):
        field = f"{name}{value}" if name.endswith(":**") else f"{name}{sep}{value}"
        replies.append(
            f"extracted_final_answer: 1988-96\n\nreasoning: They match.\n\n{field}\n\nconfidence: 80"
        )
    wrappers = [
        "<think>The answer matches, so correct: yes. Let me write it.</think>\n{body}",
        "<think>Is it right? If not, correct: no. It is.</think>\n{body}",
        "```\n{body}\n```",
        "{body}\n\nNote: the earlier field says correct: no was considered.",
        '{{"extracted_final_answer": "1988-96", "reasoning": "same", "correct": "{value}"}}',
        "The response is incorrect: yes, it differs.\n{body}",
        "{body}",
    ]
    for wrapper, value in itertools.product(wrappers, ["yes", "no"]):
        body = f"extracted_final_answer: x\nreasoning: r\ncorrect: {value}\nconfidence: 100"
        replies.append(wrapper.format(body=body, value=value))
    replies += ["", "correct", "correct: ", "correct: yesterday", "I cannot grade this.", "correct: maybe"]
    return list(dict.fromkeys(replies))


def simpleqa_replies() -> list[str]:
    shapes = ["{x}", "{x}.", "**{x}**", "Grade: {x}", "The answer is {x}", "({x})", "{x}: {word}", "  {x}\n"]
    words = {"A": "CORRECT", "B": "INCORRECT", "C": "NOT_ATTEMPTED"}
    replies = [s.format(x=x, word=words[x]) for s, x in itertools.product(shapes, "ABC")]
    replies += ["CORRECT", "INCORRECT", "NOT_ATTEMPTED", "correct", "", "I think it is B, not A.", "a"]
    return list(dict.fromkeys(replies))


def web_task(source: str) -> dict[str, Any]:
    return {"task_id": f"{source}:0", "source": source, "family": "web", "question": QUESTION,
            "gold_answers": GOLDS, "test_cases": None, "metadata": "{}"}  # fmt: skip


CASES = {
    "browsecomp": ("browsecomp", "simple-evals-browsecomp", browsecomp_replies(), "yes"),
    "hle": ("hle_test", "hle-browsecomp-template", browsecomp_replies(), "yes"),
    "simpleqa": ("simpleqa", "simple-evals-simpleqa", simpleqa_replies(), "A"),
}


@pytest.mark.parametrize("grader", list(CASES))
def test_our_scorer_and_the_publishers_grader_agree_on_every_generated_reply(grader: str) -> None:
    source, scorer, replies, correct_label = CASES[grader]
    disagree = []
    for reply in replies:
        label, their_messages = publisher_grade(grader, reply, QUESTION, GOLDS[0], RESPONSE)
        judge = FakeJudge(reply)
        verdict = score_task(web_task(source), RESPONSE, judge=judge)
        assert verdict.scorer.name == scorer
        if verdict.correct != (label == correct_label) or judge.asked != their_messages:
            disagree.append((reply, label, verdict.correct))
    verdicts = {publisher_grade(grader, r, QUESTION, GOLDS[0], RESPONSE)[0] for r in replies}
    print(f"{grader}: {len(replies)} generated judge replies, {len(replies) - len(disagree)} agree")
    assert disagree == [] and len(replies) >= (300 if grader != "simpleqa" else 30)
    assert len(verdicts) >= 2  # the replies exercise both verdicts


def test_the_publishers_parser_decides_the_shapes_the_issue_lists() -> None:
    def verdict(reply: str) -> bool:
        return grade(FakeJudge(reply), "browsecomp", QUESTION, RESPONSE, GOLDS).verdict

    assert not verdict("Correct: yes")  # case-sensitive
    assert verdict("<think>maybe correct: yes</think>\ncorrect: no")  # the first match, even in <think>
    assert verdict("correct: yes, mostly")  # a qualified value: the regex reads "yes"
    assert not verdict("**correct:** yes")  # markdown between the field and the value
    assert not verdict('{"correct": "yes"}')


def test_the_judge_sees_the_publishers_prompt_as_one_user_message() -> None:
    judge = FakeJudge("correct: yes")
    result = grade(judge, "browsecomp", QUESTION, RESPONSE, ["a", "b"])
    template = grader_template("browsecomp")
    expected = template.format(question=QUESTION, response=RESPONSE, correct_answer="a | b")
    assert judge.asked == [[{"content": expected, "role": "user"}]] and result.label == "yes"
    assert grader_template("hle") == template and "[correct_answer]" in template
    assert "NOT_ATTEMPTED" in grader_template("simpleqa")


def test_the_scorers_name_the_package_and_version() -> None:
    version = package_version(SIMPLE_EVALS)
    assert version == "26.3"
    for name in ("simple-evals-browsecomp", "hle-browsecomp-template", "simple-evals-simpleqa"):
        info = SCORERS[name].info
        assert info.package == f"nvidia-simple-evals {version}" and info.published
    assert scorer_for("browsecomp", "web", judge=True).scorer.info.name == "simple-evals-browsecomp"
    assert scorer_for("hle_test", "web", judge=True).scorer.info.name == "hle-browsecomp-template"
    assert scorer_for("simpleqa", "web", judge=True).scorer.info.name == "simple-evals-simpleqa"
    verdict = score_task(web_task("browsecomp"), RESPONSE, judge=FakeJudge("correct: yes"))
    assert verdict.correct and "fake-grader/simple-evals browsecomp: yes" in verdict.detail
