"""The segment model of a Chain-of-Agents trajectory: tags, segments, parsed grades, errors.

A trajectory is an ordered tuple of :class:`Segment` ``(tag, content)``. Three kinds of tag exist:

* role tags, written by the model: ``think plan reflection suggested_answer double_check answer``;
* tool tags, written by the model: ``web_search crawl_page wiki_search code visual_inspector``;
* the environment tag ``observation``: a tool's output, never written by the model.

Two role segments carry structured fields, parsed from their content when the segment is built:

* ``reflection`` → :class:`ReflectionGrades` (information conflict, tool effectiveness,
  trajectory monitoring; each good / average / poor, "fair" read as average);
* ``double_check`` → an integer score 1–4.

A field is ``None`` when the content does not carry it in a readable form; whether that is an
error is up to the grammar variant (see :mod:`coa.format.grammar`). Fields are derived from the
content, so they take no part in equality.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from coa.errors import CheckFailed

ROLE_TAGS: tuple[str, ...] = ("think", "plan", "reflection", "suggested_answer", "double_check", "answer")
TOOL_TAGS: tuple[str, ...] = ("web_search", "crawl_page", "wiki_search", "code", "visual_inspector")
ENV_TAGS: tuple[str, ...] = ("observation",)
TAGS: tuple[str, ...] = ROLE_TAGS + TOOL_TAGS + ENV_TAGS

Grade = Literal["good", "average", "poor"]


class FormatError(CheckFailed, ValueError):
    """A violation of the trajectory format.

    ``rule`` names the violated rule (stable, for tests and reports); ``position`` is a character
    offset in the rendered text and ``segment`` a segment index, each when known.
    """

    def __init__(self, rule: str, message: str, *, position: int | None = None, segment: int | None = None):
        where = []
        if position is not None:
            where.append(f"char {position}")
        if segment is not None:
            where.append(f"segment {segment}")
        super().__init__(f"{rule}: {message}" + (f" ({', '.join(where)})" if where else ""))
        self.rule = rule
        self.message = message
        self.position = position
        self.segment = segment

    def as_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "message": self.message,
            "position": self.position,
            "segment": self.segment,
        }


# -- parsed fields ------------------------------------------------------------------------------------

CRITERIA: tuple[str, ...] = ("information_conflict", "tool_effectiveness", "trajectory_monitoring")
_GRADE_WORDS: dict[str, Grade] = {"good": "good", "average": "average", "fair": "average", "poor": "poor"}
# "Information Conflict: Good", "**Tool Effectiveness** - average", "(3) Trajectory Monitoring = Fair".
_CRITERION_RE = {
    name: re.compile(
        r"\b" + r"[\s_-]*".join(name.split("_")) + r"[^\w\n]{0,8}(good|average|fair|poor)\b", re.I
    )
    for name in CRITERIA
}
# "Score: 4", "score 3/4", "**Score**: 2", "score of 4"; or a content that starts with the digit.
_SCORE_RE = re.compile(r"\bscore(?:\s+(?:of|is))?[^\w\n]{0,8}([1-4])(?!\d|[.,]\d)", re.I)
_LEADING_SCORE_RE = re.compile(r"\A[^\w\n]{0,4}([1-4])(?!\d|[.,]\d)")


@dataclass(frozen=True)
class ReflectionGrades:
    information_conflict: Grade
    tool_effectiveness: Grade
    trajectory_monitoring: Grade

    @property
    def any_poor(self) -> bool:
        return "poor" in (self.information_conflict, self.tool_effectiveness, self.trajectory_monitoring)


def parse_reflection(content: str) -> ReflectionGrades | None:
    """The three grades of a reflection, or ``None`` if any criterion is missing."""
    grades: list[Grade] = []
    for name in CRITERIA:
        m = _CRITERION_RE[name].search(content)
        if m is None:
            return None
        grades.append(_GRADE_WORDS[m.group(1).lower()])
    return ReflectionGrades(*grades)


def parse_double_check(content: str) -> int | None:
    """The 1–4 score of a double check (the first ``score N``, else a leading digit), or ``None``."""
    m = _SCORE_RE.search(content) or _LEADING_SCORE_RE.search(content)
    return int(m.group(1)) if m else None


# -- segments and trajectories ------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """One ``<tag>`` block. ``grades`` / ``score`` are parsed from the content (reflection / double_check)."""

    tag: str
    content: str
    grades: ReflectionGrades | None = field(default=None, init=False, compare=False, repr=False)
    score: int | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.tag not in TAGS:
            raise FormatError("unknown_tag", f"unknown tag {self.tag!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"segment content must be str, not {type(self.content).__name__}")
        if self.tag == "reflection":
            object.__setattr__(self, "grades", parse_reflection(self.content))
        elif self.tag == "double_check":
            object.__setattr__(self, "score", parse_double_check(self.content))

    @property
    def is_tool(self) -> bool:
        return self.tag in TOOL_TAGS


@dataclass(frozen=True)
class Trajectory:
    segments: tuple[Segment, ...]

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> Trajectory:
        """Build from ``(tag, content)`` pairs: ``Trajectory.of([("think", "..."), ...])``."""
        return cls(tuple(Segment(tag, content) for tag, content in pairs))

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(s.tag for s in self.segments)

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments)

    def __len__(self) -> int:
        return len(self.segments)
