"""BrowseComp's and HLE's LLM graders: their prompts (``prompts/*.yaml``) and exact verdict parsing.

Both benchmarks score a response by asking a grader model for four labelled fields
(``extracted_final_answer``, ``reasoning``, ``correct: yes|no``, ``confidence``); only ``correct``
decides. :func:`parse_grade` reads a grader's reply:

* the verdict is the **captured group** of the ``correct`` field, ``yes`` or ``no``. (A widely used
  BrowseComp grader returned the whole regex match, ``"correct: yes"``, and compared it with
  ``"yes"``: every answer scored wrong. :func:`parse_grade` returns the group.)
* The real output shapes are read: plain ``field: value`` lines, markdown emphasis around a field
  name or value (``**correct:** yes``), any letter case, and a JSON object with the same keys (HLE's
  structured-output judge replies ``{"extracted_final_answer", "reasoning", "correct",
  "confidence", "strict"}``). The ``correct`` field must be the exact word ``yes`` or ``no``
  (trailing punctuation aside): ``correct: yes, mostly`` or ``correct: partially`` is malformed.
* A malformed reply never crashes and never counts as correct: no ``correct`` field, a value that
  is not ``yes``/``no``, or two ``correct`` fields that disagree give ``verdict=None`` with the
  reason, and the scorer marks the answer incorrect, saying why.

``confidence`` is read as a number in [0, 100] (``85%``, ``85``, ``0.85`` is 0.85, not 85%: a bare
number is taken as written), None when absent or unreadable; it does not affect the verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any, Protocol

import yaml

FIELDS = ("extracted_final_answer", "reasoning", "correct", "confidence")
_FIELD_LINE = re.compile(
    r"^[ \t>*_#-]*(extracted_final_answer|reasoning|correct|confidence)[*_ \t]*:[*_ \t]*(.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_VERDICT = re.compile(r"^[*_ \t\"']*(yes|no)[*_ \t\"'.!]*$", re.IGNORECASE)
_CONFIDENCE = re.compile(r"(\d+(?:\.\d+)?)\s*%?")


@dataclasses.dataclass(frozen=True)
class Grade:
    """What a grader's reply says: the verdict (None when it cannot be read) and why."""

    verdict: bool | None
    reason: str
    extracted_final_answer: str | None = None
    confidence: float | None = None


@functools.cache
def grader_prompt(name: str) -> dict[str, str]:
    """The versioned grader prompt ``prompts/<name>.yaml`` (``browsecomp`` or ``hle``)."""
    text = resources.files("coa.scoring").joinpath("prompts", f"{name}.yaml").read_text("utf-8")
    return {k: str(v) for k, v in yaml.safe_load(text).items()}


def grader_messages(
    name: str, question: str, response: str, gold_answers: Sequence[str]
) -> list[dict[str, str]]:
    """The chat messages asking grader ``name`` about one response."""
    prompt = grader_prompt(name)
    user = prompt["user"].format(
        question=question, response=response, correct_answer=" | ".join(gold_answers)
    )
    return [
        {"role": "system", "content": prompt["system"].strip()},
        {"role": "user", "content": user.strip()},
    ]


def _confidence(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    else:
        m = _CONFIDENCE.search(str(value))
        if m is None:
            return None
        number = float(m.group(1))
    return number if 0.0 <= number <= 100.0 else None


def _from_json(text: str) -> dict[str, Any] | None:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or "correct" not in {str(k).lower() for k in data}:
        return None
    return {str(k).lower(): v for k, v in data.items()}


def _verdict_of(values: Sequence[str]) -> tuple[bool | None, str]:
    verdicts = []
    for value in values:
        m = _VERDICT.match(value.strip())
        if m is None:
            return None, f"malformed: the correct field is {value.strip()[:60]!r}, not yes or no"
        verdicts.append(m.group(1).lower() == "yes")
    if not verdicts:
        return None, "malformed: no correct field in the grader's reply"
    if len(set(verdicts)) > 1:
        return None, "malformed: the grader's reply has correct fields that disagree"
    return verdicts[0], "correct: yes" if verdicts[0] else "correct: no"


def parse_grade(text: str | None) -> Grade:
    """The verdict of a grader reply (see the module docstring); never raises."""
    if text is None or not text.strip():
        return Grade(None, "malformed: empty grader reply")
    data = _from_json(text)
    if data is not None:
        raw = data.get("correct")
        verdict, reason = _verdict_of([raw if isinstance(raw, str) else json.dumps(raw)])
        extracted = data.get("extracted_final_answer")
        return Grade(
            verdict,
            reason,
            None if extracted is None else str(extracted),
            _confidence(data.get("confidence")),
        )
    fields: dict[str, list[str]] = {}
    for m in _FIELD_LINE.finditer(text):
        fields.setdefault(m.group(1).lower(), []).append(m.group(2))
    verdict, reason = _verdict_of(fields.get("correct", []))
    extracted = fields.get("extracted_final_answer", [None])[0]
    confidences = fields.get("confidence", [])
    return Grade(
        verdict,
        reason,
        None if extracted is None else extracted.strip().strip("*_").strip(),
        _confidence(confidences[0]) if confidences else None,
    )


class ChatJudge(Protocol):
    """A grader model: one chat completion per call (:class:`coa.scoring.judge.LLMJudge` is one)."""

    model: str

    def complete(self, messages: list[dict[str, str]], attempt: int = 0) -> str: ...


def grade(
    judge: ChatJudge, name: str, question: str, response: str, gold_answers: Sequence[str], attempts: int = 3
) -> tuple[Grade, str]:
    """Ask ``judge`` with grader ``name``; retried (a new sample) while the reply is malformed.

    Returns the grade and the tag ``model/prompt-version`` for the audit trail. After ``attempts``
    malformed replies the last one's grade is returned (verdict None).
    """
    messages = grader_messages(name, question, response, gold_answers)
    tag = f"{judge.model}/{grader_prompt(name)['version']}"
    result = Grade(None, "malformed: no reply")
    for attempt in range(max(1, attempts)):
        result = parse_grade(judge.complete(messages, attempt))
        if result.verdict is not None:
            break
    return result, tag


def describe(grade_: Grade, tag: str) -> str:
    """One line for ``eval.v1`` ``score_detail``."""
    parts = [f"grader {tag}: {grade_.reason}"]
    if grade_.extracted_final_answer is not None:
        parts.append(f"extracted={grade_.extracted_final_answer[:80]!r}")
    if grade_.confidence is not None:
        parts.append(f"confidence={grade_.confidence:g}")
    return "; ".join(parts)


__all__ = [
    "FIELDS", "ChatJudge", "Grade", "describe", "grade", "grader_messages", "grader_prompt", "parse_grade",
]  # fmt: skip
