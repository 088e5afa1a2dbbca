"""Parsing the agents' text replies: actions, reflection grades, verification scores.

Every agent answers in a small line-oriented format (``Thought:`` / ``Action:`` / ``Action Input:``),
which any instruction-following LLM can produce and which the rule-based backend writes too. A reply
that does not parse raises :class:`ParseError`; the runtime records it as an error step and asks the
agent again, as OAgents does.
"""

from __future__ import annotations

import dataclasses
import re

from coa.errors import CoaError

GRADES = ("good", "average", "poor")
CRITERIA = ("information_conflict", "tool_effectiveness", "trajectory_monitoring")
_CRITERION_LABELS = {
    "information_conflict": r"information\s+conflict",
    "tool_effectiveness": r"tool\s+effectiveness",
    "trajectory_monitoring": r"trajectory\s+monitoring",
}


class ParseError(CoaError, ValueError):
    """A reply is not in the expected format; the message tells the agent how to fix it."""


@dataclasses.dataclass(frozen=True)
class Action:
    thought: str
    name: str
    input: str
    review: str | None = None  # optional "Review:" of the last observation, before the thought


@dataclasses.dataclass(frozen=True)
class Reflection:
    grades: dict[str, str]
    text: str
    thought: str | None = None

    @property
    def poor(self) -> bool:
        return "poor" in self.grades.values()


@dataclasses.dataclass(frozen=True)
class Verification:
    suggested_answer: str
    score: int
    analysis: str
    thought: str | None = None


@dataclasses.dataclass(frozen=True)
class Plan:
    plan: str
    thought: str | None = None


_THOUGHT_LINE = re.compile(r"^\s*Thought:\s*(?P<thought>.*?)\n(?P<rest>.*)\Z", re.DOTALL)


def split_thought(text: str) -> tuple[str | None, str]:
    """An optional leading ``Thought: …`` line (up to the next line) and the rest."""
    m = _THOUGHT_LINE.match(text.strip())
    if m is None:
        return None, text.strip()
    return m["thought"].strip() or None, m["rest"].strip()


def parse_plan(text: str) -> Plan:
    """``Thought: …`` (optional) then ``Plan:`` and the numbered steps (or just the steps)."""
    thought, rest = split_thought(text)
    rest = re.sub(r"^\s*Plan:\s*", "", rest)
    if not rest.strip():
        raise ParseError("the plan is empty; write 'Plan:' and numbered steps")
    return Plan(rest.strip(), thought)


_ACTION = re.compile(
    r"^\s*(?:Review:\s*(?P<review>.*?)\n\s*)?Thought:\s*(?P<thought>.*?)\n\s*Action:\s*(?P<name>[A-Za-z_]+)\s*\n"
    r"\s*Action Input:\s*(?P<input>.*)\Z",
    re.DOTALL,
)


def parse_action(text: str, allowed: tuple[str, ...]) -> Action:
    """Parse ``Thought: … / Action: name / Action Input: …``; ``name`` must be in ``allowed``."""
    m = _ACTION.match(text.strip())
    if m is None:
        raise ParseError(
            "reply must be 'Thought: <reasoning>' then 'Action: <name>' then 'Action Input: <input>'"
            " on separate lines"
        )
    name = m["name"].strip()
    if name not in allowed:
        raise ParseError(f"unknown action {name!r}; choose one of {', '.join(allowed)}")
    value = m["input"].strip()
    if not value:
        raise ParseError("Action Input is empty")
    review = (m["review"] or "").strip() or None
    return Action(m["thought"].strip(), name, value, review)


def parse_reflection(text: str) -> Reflection:
    """Three graded criteria (good/average/poor; 'fair' reads as average) and the reflection text."""
    thought, text = split_thought(text)
    grades: dict[str, str] = {}
    for key, label in _CRITERION_LABELS.items():
        m = re.search(rf"{label}\s*:\s*(good|average|fair|poor)", text, re.IGNORECASE)
        if m is None:
            raise ParseError(f"reflection must grade '{key.replace('_', ' ')}' as good, average or poor")
        grade = m.group(1).lower()
        grades[key] = "average" if grade == "fair" else grade
    body = re.search(r"Reflection\s*:\s*(.*)\Z", text, re.DOTALL | re.IGNORECASE)
    return Reflection(grades, (body.group(1) if body else text).strip(), thought)


def parse_verification(text: str) -> Verification:
    """``Suggested Answer: …``, ``Score: 1-4`` and an optional ``Analysis: …``."""
    thought, text = split_thought(text)
    answer = re.search(r"Suggested Answer\s*:\s*(.*?)\s*(?:\n|$)", text, re.IGNORECASE)
    score = re.search(r"Score\s*:\s*([1-4])\b", text, re.IGNORECASE)
    if answer is None or not answer.group(1).strip() or score is None:
        raise ParseError("verification must give 'Suggested Answer: <answer>' and 'Score: <1-4>'")
    analysis = re.search(r"Analysis\s*:\s*(.*)\Z", text, re.DOTALL | re.IGNORECASE)
    return Verification(
        answer.group(1).strip(), int(score.group(1)), analysis.group(1).strip() if analysis else "", thought
    )


def extract_code(text: str) -> str:
    """The Python in fenced ```py / ```python blocks (joined), or the text itself if unfenced."""
    blocks = re.findall(r"```(?:py|python)?\s*\n(.*?)```", text, re.DOTALL)
    return "\n\n".join(b.strip("\n") for b in blocks) if blocks else text.strip()
