"""Grammar variants: the transition rules of each trajectory family, as explicit state machines.

A variant is a :class:`Grammar`, read as follows. *Functions* are all segments except ``think``
and ``observation``. ``after[f]`` lists the functions that may come next after function ``f``
(``START`` for the first one); ``think`` segments in between are transparent, and an
``observation`` belongs to the tool call it follows, so ``plan → think → web_search → observation
→ think → reflection`` checks ``START→plan``, ``plan→web_search``, ``web_search→reflection``.
``think_before`` lists the functions that must directly follow a ``think``; a ``think`` must in turn
directly precede one of them (so no ``think`` right after ``think``).

Rules (the ``rule`` of the reported :class:`FormatError`):

=================================  ===================================================================
``tag_not_allowed``                 a tag the variant does not use
``empty_segment``                   a segment whose content is only whitespace
``nesting``                         a live tag inside a model-written segment (Trajectory input)
``answer_once``                     not exactly one ``answer``
``answer_last``                     a segment after the ``answer``
``missing_observation``             a tool call not directly followed by an ``observation``
``observation_without_tool``        an ``observation`` not directly after a tool call
``think_before``                    a function in ``think_before`` not directly after a ``think``
``think_position``                  a ``think`` not directly before a function in ``think_before``
``transition``                      ``f → g`` with ``g`` not in ``after[f]``
``reflection_grades``               a reflection without three readable grades (where required)
``double_check_score``              a double check without a readable 1–4 score (where required)
``code_fence``                      a ``<code>`` that is not one ```` ```py ```` block and an optional
                                    ```` ```sh ```` stdin block (``code_math``: AFM's code format,
                                    :mod:`coa.format.code`)
``replan_after_poor_reflection``    a reflection with a poor grade not followed by ``plan``
``answer_needs_double_check``       an ``answer`` not after a double check scored ≥ 3
``replan_after_low_score``          a double check scored < 3 not followed by ``plan``
=================================  ===================================================================

Plus the parse rules of :mod:`coa.format.codec` when ``validate`` is given text. Checks run
segment by segment, so the reported error is the first violation in text order (the two global
answer rules are checked first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from coa.format.code import code_format_error
from coa.format.codec import LIVE_TAG_RE, render_segment, scan
from coa.format.segments import TOOL_TAGS, FormatError, Segment, Trajectory

START = "START"
_Fail = Callable[[str, int, str], FormatError]


@dataclass(frozen=True)
class Grammar:
    name: str
    tags: frozenset[str]
    after: Mapping[str, frozenset[str]]
    think_before: frozenset[str]
    requires_grades: bool = False  # reflections must carry grades; a poor grade forces a re-plan
    requires_double_check: bool = False  # answer only after a double check ≥ 3; < 3 forces a re-plan
    code_fence: bool = False  # every <code> is AFM's ```py block (+ optional ```sh stdin block)

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(t for t in TOOL_TAGS if t in self.tags)


def _grammar(name: str, after: dict[str, set[str]], think_before: set[str], **flags: bool) -> Grammar:
    tags = {"think", "observation"} | set(after) - {START}
    frozen = MappingProxyType({k: frozenset(v) for k, v in after.items()})
    return Grammar(name, frozenset(tags), frozen, frozenset(think_before), **flags)


_WEB_TOOLS = {"web_search", "crawl_page"}
_AFM_TOOLS = {"web_search", "crawl_page", "code", "visual_inspector"}
_AFM_FREE = _AFM_TOOLS | {"plan", "reflection", "suggested_answer"}

GRAMMARS: Mapping[str, Grammar] = MappingProxyType(
    {
        # AFM "double check" rules (DOUBLE_CHECK_RULE); think before every function.
        "web": _grammar(
            "web",
            {
                START: {"plan"},
                "plan": _WEB_TOOLS | {"suggested_answer"},
                "web_search": _WEB_TOOLS | {"reflection", "suggested_answer"},
                "crawl_page": _WEB_TOOLS | {"reflection", "suggested_answer"},
                "reflection": {"plan"} | _WEB_TOOLS | {"suggested_answer"},
                "suggested_answer": {"double_check"},
                "double_check": {"plan"} | _WEB_TOOLS | {"answer"},
                "answer": set(),
            },
            think_before={"plan", *_WEB_TOOLS, "reflection", "suggested_answer", "double_check", "answer"},
            requires_grades=True,
            requires_double_check=True,
        ),
        # AFM MHQA_PROMPT: the web table with wiki_search as the only tool and answer in place of
        # suggested_answer / double_check; reflections are free text.
        "mhqa": _grammar(
            "mhqa",
            {
                START: {"plan"},
                "plan": {"wiki_search", "answer"},
                "wiki_search": {"wiki_search", "reflection", "answer"},
                "reflection": {"plan", "wiki_search", "answer"},
                "answer": set(),
            },
            think_before={"plan", "wiki_search", "reflection", "answer"},
        ),
        # Code/math prompts: plan, (think, code, observation, reflection)*, think, answer.
        "code_math": _grammar(
            "code_math",
            {
                START: {"plan"},
                "plan": {"code", "answer"},
                "code": {"reflection"},
                "reflection": {"code", "answer"},
                "answer": set(),
            },
            think_before={"code", "answer"},
            code_fence=True,
        ),
        # AFM_TOOLS: all tools, think before every function, suggested_answer → double_check → answer.
        "afm": _grammar(
            "afm",
            {
                START: {"plan"},
                "plan": _AFM_FREE - {"plan"},
                **{tool: set(_AFM_FREE) for tool in _AFM_TOOLS},
                "reflection": _AFM_FREE - {"reflection"},
                "suggested_answer": {"double_check"},
                "double_check": (_AFM_FREE - {"suggested_answer"}) | {"answer"},
                "answer": set(),
            },
            think_before=_AFM_FREE | {"double_check", "answer"},
            requires_grades=True,
            requires_double_check=True,
        ),
    }
)
VARIANTS: tuple[str, ...] = tuple(GRAMMARS)


@dataclass(frozen=True)
class ValidationResult:
    ok: bool
    error: FormatError | None = None

    @property
    def rule(self) -> str | None:
        return self.error.rule if self.error else None

    def __bool__(self) -> bool:
        return self.ok


def grammar(variant: str) -> Grammar:
    try:
        return GRAMMARS[variant]
    except KeyError:
        raise ValueError(f"unknown variant {variant!r}; variants: {', '.join(VARIANTS)}") from None


def validate(source: str | Trajectory, variant: str, *, strict: bool = True) -> ValidationResult:
    """Check text (parsed with ``strict``) or a trajectory against a variant's rules."""
    g = grammar(variant)
    try:
        if isinstance(source, str):
            located = list(scan(source, strict=strict))
            segments = [x.segment for x in located]
            starts = [x.start for x in located] + [len(source)]
        else:
            segments = list(source.segments)
            starts = _offsets(segments)
        check(segments, g, starts)
    except FormatError as e:
        return ValidationResult(False, e)
    return ValidationResult(True)


def check(segments: list[Segment], g: Grammar, starts: list[int]) -> None:
    """Run the state machine of ``g`` over ``segments``; raise the first violation.

    ``starts`` holds each segment's start offset and, last, the end of the text.
    """

    def fail(rule: str, i: int, message: str) -> FormatError:
        return FormatError(rule, message, position=starts[i], segment=i if i < len(segments) else None)

    answers = [i for i, s in enumerate(segments) if s.tag == "answer"]
    if len(answers) != 1:
        at = answers[1] if len(answers) > 1 else len(segments)
        raise fail("answer_once", at, f"{len(answers)} answer segments; exactly one is required")
    if answers[0] != len(segments) - 1:
        raise fail("answer_last", answers[0] + 1, "a segment follows the answer")

    last = START  # the last function (a tool stays "last" through its observation)
    last_segment: Segment | None = None  # the last function's segment, for its grades / score
    for i, seg in enumerate(segments):
        tag, prev = seg.tag, (segments[i - 1].tag if i else None)
        if tag not in g.tags:
            raise fail("tag_not_allowed", i, f"<{tag}> is not used by the {g.name} variant")
        if not seg.content.strip():
            raise fail("empty_segment", i, f"<{tag}> is empty")
        if tag != "observation" and (m := LIVE_TAG_RE.search(seg.content)):
            raise fail("nesting", i, f"live tag {m.group(0)!r} inside <{tag}>")
        if tag == "code" and g.code_fence and (problem := code_format_error(seg.content)) is not None:
            raise fail("code_fence", i, problem)
        if prev in TOOL_TAGS and tag != "observation":
            raise fail("missing_observation", i, f"<{prev}> must be followed by <observation>")
        if tag == "observation":
            if prev not in TOOL_TAGS:
                raise fail("observation_without_tool", i, "<observation> must directly follow a tool call")
            continue
        if prev == "think" and tag not in g.think_before:
            raise fail("think_position", i - 1, f"<think> may not directly precede <{tag}>")
        if tag == "think":
            continue
        if tag in g.think_before and prev != "think":
            raise fail("think_before", i, f"<{tag}> must directly follow a <think>")
        if tag not in g.after[last]:
            allowed = ", ".join(sorted(g.after[last])) or "nothing"
            raise fail("transition", i, f"<{tag}> may not follow {_name(last)} (allowed: {allowed})")
        if last_segment is not None:
            _check_fields(g, last_segment, seg, i, fail)
        last, last_segment = tag, seg
        if g.requires_grades and tag == "reflection" and seg.grades is None:
            raise fail("reflection_grades", i, "reflection lacks one of its three good/average/poor grades")
        if g.requires_double_check and tag == "double_check" and seg.score is None:
            raise fail("double_check_score", i, "double_check lacks a 1-4 score")


def _check_fields(g: Grammar, prev: Segment, seg: Segment, i: int, fail: _Fail) -> None:
    """Rules that depend on the previous function's parsed fields."""
    if g.requires_grades and prev.grades is not None and prev.grades.any_poor and seg.tag != "plan":
        raise fail("replan_after_poor_reflection", i, "a poor reflection grade must be followed by <plan>")
    if g.requires_double_check and prev.tag == "double_check" and prev.score is not None:
        if seg.tag == "answer" and prev.score < 3:
            raise fail("answer_needs_double_check", i, f"answer after a double_check scored {prev.score} < 3")
        if prev.score < 3 and seg.tag != "plan":
            raise fail("replan_after_low_score", i, f"double_check scored {prev.score} < 3: re-plan")


def _name(function: str) -> str:
    return "the start" if function == START else f"<{function}>"


def _offsets(segments: list[Segment]) -> list[int]:
    """Start offsets of segments in the canonical rendering, then its end (for error positions)."""
    starts, pos = [], 0
    for seg in segments:
        starts.append(pos)
        try:
            pos += len(render_segment(seg))
        except FormatError:
            pos += len(f"<{seg.tag}>\n{seg.content}\n</{seg.tag}>\n")
    return [*starts, pos]
