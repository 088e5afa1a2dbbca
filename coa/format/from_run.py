"""Multi-agent trajectory (``trajectory.v1`` row) → one Chain-of-Agents trajectory.

The mapping (``oagents-spec.md`` §7), step by step:

===========================================  ====================================================
teacher step                                  CoA segments
===========================================  ====================================================
manager ``plan`` (+ its thought)              ``think`` (the thought) → ``plan``
any agent's ``think``                         ``think`` (consecutive thoughts merge)
``tool_call``                                 ``<tool>`` (query / url / code) → ``observation``;
                                              ``code_math`` code is re-fenced in AFM's format
sub-agent observation review                  ``reflection`` where the variant reviews every tool
                                              call (``code_math``), else part of the next ``think``
reflector ``reflection`` (graded)             ``think`` (its thought) → ``reflection`` with grades
verifier ``verification``                     ``suggested_answer`` → ``think`` → ``double_check``
manager ``final_answer``                      ``answer`` (``\\boxed{}`` for math, one ```` ```py ````
                                              block for code)
``delegate``, ``error``                       dropped (the sub-agent steps carry the content)
===========================================  ====================================================

AFM's code format (:mod:`coa.format.code`): in ``code_math`` the code of a call is re-fenced as one
```` ```py ```` block plus, when the program read standard input, one ```` ```sh ```` block. The
code and stdin are those the code tool extracted and ran (:func:`coa.format.code.extract_code`:
```` ```python ```` / ```` ```py ```` blocks joined, bare fences, or unfenced code), so the
observation still belongs to the text; a payload that holds no runnable code, or code holding
```` ``` ````, stays as it was and fails the grammar's ``code_fence`` rule.

**Native CoA runs** (a policy's own CoA text, e.g. an RL rollout made a run by
:mod:`coa.curate.rollouts`): every step carries its segment's tag in ``fields`` (``coa_tag``) and a
tool call its observation; such a run converts to exactly those segments, in order, with nothing
mapped, merged or stripped, under the override variant, else the ``variant`` its
``teacher_config`` records, else the variant by family and tools.

Variants without a step (``code_math`` has no suggested_answer/double_check; reflections there are
free text) drop it. Nothing is invented: when the result breaks the variant's grammar (e.g. the
teacher never planned), the conversion fails for that row with the grammar rule as the reason.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from coa.format import FormatError, Segment, Trajectory, extract_boxed, extract_code_block, render, validate
from coa.format.code import extract_code, render_code

NATIVE_TAG = "coa_tag"
"""Step field of a native CoA run: the tag of the segment the step holds."""

FAMILY_VARIANT = {"math": "code_math", "code": "code_math", "mhqa": "web", "web": "web"}
TOOL_ARG = {"web_search": "query", "wiki_search": "query", "crawl_page": "url", "code": "code"}


@dataclasses.dataclass(frozen=True)
class Conversion:
    variant: str
    trajectory: Trajectory | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.trajectory is not None


def variant_of(family: str, variants: Mapping[str, str]) -> str:
    """The CoA variant of a task family (``variants`` overrides, as in the convert stage): what a
    model is prompted and checked with. A teacher's run is refined by its tools (:func:`variant_for`)."""
    chosen = variants.get(family, "auto")
    return FAMILY_VARIANT[family] if chosen == "auto" else chosen


def variant_for(row: Mapping[str, Any], overrides: Mapping[str, str] | None = None) -> str:
    """The grammar variant of a run: by family, refined by the tools it used."""
    family = row["family"]
    if overrides and family in overrides and overrides[family] != "auto":
        return overrides[family]
    tools = {s["tool_name"] for s in row["steps"] if s["role"] == "tool_call" and s["tool_name"]}
    if tools and tools <= {"wiki_search"}:
        return "mhqa"
    if "code" in tools and tools & {"web_search", "crawl_page", "visual_inspector"}:
        return "afm"
    return FAMILY_VARIANT[family]


def _fields(step: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(step["fields"]) if step.get("fields") else {}


def _answer(family: str, text: str) -> str:
    text = text.strip()
    if family == "math":
        return text if extract_boxed(text) is not None else f"\\boxed{{{text}}}"
    if family == "code":
        code = extract_code_block(text)
        return render_code(code) if code and code.strip() and "```" not in code else text
    return text


def _afm_code(payload: str) -> str:
    """A code payload in AFM's format (the same code and stdin), or unchanged when it has none."""
    extracted = extract_code(payload)
    if extracted is None:
        return payload
    try:
        return render_code(extracted.code, extracted.stdin or None)
    except ValueError:
        return payload


def _grades(fields: Mapping[str, Any], text: str) -> str:
    names = (
        ("information_conflict", "Information Conflict"),
        ("tool_effectiveness", "Tool Effectiveness"),
        ("trajectory_monitoring", "Trajectory Monitoring"),
    )
    lines = [f"{label}: {fields[key]}" for key, label in names if key in fields]
    return "\n".join([*lines, text.strip()]) if text.strip() else "\n".join(lines)


class _Builder:
    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.segments: list[Segment] = []
        self.pending_review: list[str] = []

    def think(self, text: str | None) -> None:
        text = (text or "").strip()
        if self.pending_review:
            text = " ".join([*self.pending_review, text]).strip()
            self.pending_review = []
        if not text:
            return
        if self.segments and self.segments[-1].tag == "think":
            self.segments[-1] = Segment("think", f"{self.segments[-1].content}\n{text}")
        else:
            self.segments.append(Segment("think", text))

    def add(self, tag: str, content: str) -> None:
        if self.pending_review and tag != "observation":  # an unplaced review joins the next thought
            self.think(None)
        self.segments.append(Segment(tag, content.strip()))

    def review(self, text: str) -> None:
        if self.variant == "code_math" and self.segments and self.segments[-1].tag == "observation":
            self.segments.append(Segment("reflection", text.strip()))
        elif self.variant == "code_math" and self.segments and self.segments[-1].tag == "reflection":
            self.segments[-1] = Segment("reflection", f"{self.segments[-1].content}\n{text.strip()}")
        else:
            self.pending_review.append(text.strip())


def native_segments(row: Mapping[str, Any]) -> list[Segment] | None:
    """The segments of a native CoA run (see the module docstring); None for a teacher run."""
    steps = row["steps"]
    if not steps:
        return None
    segments: list[Segment] = []
    for step in steps:
        tag = _fields(step).get(NATIVE_TAG)
        if tag is None:
            return None
        segments.append(Segment(str(tag), step["text"] or ""))
        if step["role"] == "tool_call" and step["observation"] is not None:
            segments.append(Segment("observation", step["observation"]))
    return segments


def recorded_variant(row: Mapping[str, Any]) -> str | None:
    """The ``variant`` a run's ``teacher_config`` records (native runs do), else None."""
    try:
        config = json.loads(row.get("teacher_config") or "{}")
    except json.JSONDecodeError:
        return None
    value = config.get("variant") if isinstance(config, dict) else None
    return str(value) if value else None


def to_coa(row: Mapping[str, Any], variant: str | None = None) -> Conversion:
    """Convert one teacher run (or a native CoA run); ``Conversion.error`` says which rule failed."""
    try:
        native = native_segments(row)
    except FormatError as e:
        return Conversion(variant or variant_for(row), None, f"invalid_coa:{e.rule}: {e.message}")
    if native is not None:
        variant = variant or recorded_variant(row) or variant_for(row)
    variant = variant or variant_for(row)
    if row.get("final_answer") is None:
        return Conversion(variant, None, "no_final_answer: the run ended without a final answer")
    if native is not None:
        return _validated(Trajectory(tuple(native)), variant)
    b = _Builder(variant)
    graded = variant in ("web", "afm")
    for step in row["steps"]:
        role, fields = step["role"], _fields(step)
        if role == "plan":
            thought = fields.get("thought")
            if variant == "code_math":  # no think before a plan there: the thought opens the plan
                b.add("plan", f"{thought}\n{step['text'] or ''}" if thought else step["text"] or "")
            else:
                b.think(thought)
                b.add("plan", step["text"] or "")
        elif role == "think":
            b.think(step["text"])
        elif role == "tool_call":
            tool = step["tool_name"]
            if tool not in TOOL_ARG:
                return Conversion(variant, None, f"unknown_tool: {tool!r} has no CoA tag")
            args = json.loads(step["tool_args"] or "{}")
            value = str(args.get(TOOL_ARG[tool], step["text"] or ""))
            b.add(tool, _afm_code(value) if tool == "code" and variant == "code_math" else value)
            b.add("observation", step["observation"] or "(no output)")
        elif role == "reflection" and fields.get("kind") == "observation_review":
            b.review(step["text"] or "")
        elif role == "reflection":
            if graded:
                b.think(fields.get("thought"))
                b.add("reflection", _grades(fields, step["text"] or ""))
            else:
                b.review(step["text"] or "")
        elif role == "verification" and graded:
            b.add("suggested_answer", str(fields.get("suggested_answer", "")))
            b.think(fields.get("thought"))
            b.add("double_check", f"Score: {fields.get('score')}\n{step['text'] or ''}".strip())
        elif role == "final_answer":
            b.add("answer", _answer(row["family"], step["text"] or ""))
    return _validated(Trajectory(tuple(b.segments)), variant)


def _validated(trajectory: Trajectory, variant: str) -> Conversion:
    result = validate(trajectory, variant)
    if not result.ok:
        assert result.error is not None
        return Conversion(variant, None, f"invalid_coa:{result.error.rule}: {result.error.message}")
    return Conversion(variant, trajectory)


def coa_check(row: Mapping[str, Any]) -> str | tuple[str, str]:
    """For curation: the reason the run does not convert to a valid CoA trajectory, else its
    rendering ``(variant, assistant text)`` (kept in the curated row for convert)."""
    conversion = to_coa(row)
    if conversion.trajectory is None:
        return conversion.error or "invalid_coa: no trajectory"
    return conversion.variant, render(conversion.trajectory)
