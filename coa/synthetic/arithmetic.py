"""Arithmetic and algebra word problems that call for the code tool (family ``math``).

Every problem is multi-step with 2–5-digit numbers, so mental arithmetic is error-prone and a
``<code>`` call that prints one Python expression solves it. Each template has a few phrasings; the
gold answer is the integer result as a string.

The structure of a problem (what :func:`parse_question` returns and what the metadata stores) is::

    {"template": "warehouse", "variant": 1, "operands": {"n": 482, ...}, "expression": "482 * 31 * 57 - 1200"}

``expression`` is a Python expression over integer literals whose value is the answer, so an
offline teacher can act like an LLM by writing ``print(<expression>)``.

The ``chain`` template (``a op b op c`` with operands 10–999, the task shape of
``shared/reference/tiny-model-feasibility.md``) is not drawn by default: ask for it with
``templates=("chain",)`` (``synthetic.arithmetic_templates``). Its short numbers are what a tiny
student learns to copy first.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from coa.synthetic._common import Split, SyntheticError, draw_unique, rng_for, task_row, to_table

FAMILY = "arithmetic"
TASK_FAMILY = "math"

NAMES = ("Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jon", "Kim", "Lea", "Max", "Nia")
_OPS = ("+", "-", "*")
_EXPR_SHAPES = ("{0} {o0} {1} {o1} {2}", "({0} {o0} {1}) {o1} {2}", "{0} {o0} {1} {o1} {2} {o2} {3}")


def _n(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randint(lo, hi)


@dataclasses.dataclass(frozen=True)
class Template:
    """One problem template: phrasings, an operand sampler and the answer expression."""

    name: str
    phrasings: tuple[str, ...]
    draw: Callable[[random.Random], dict[str, Any]]
    expression: Callable[[dict[str, Any]], str]


def _draw_expression(rng: random.Random) -> dict[str, Any]:
    shape = rng.randrange(len(_EXPR_SHAPES))
    n_operands = 4 if "{3}" in _EXPR_SHAPES[shape] else 3
    while True:
        ops = [rng.choice(_OPS) for _ in range(n_operands - 1)]
        if "*" in ops:
            break
    operands = [_n(rng, 12, 999) if op_next == "*" else _n(rng, 100, 9999) for op_next in [*ops, "+"]]
    ops_fields = {f"o{i}": o for i, o in enumerate(ops)}
    return {"expr": _EXPR_SHAPES[shape].format(*operands, **ops_fields)}


def _draw_chain(rng: random.Random) -> dict[str, Any]:
    ops = [rng.choice(_OPS) for _ in range(2)]
    a, b, c = (_n(rng, 10, 999) for _ in range(3))
    return {"expr": f"{a} {ops[0]} {b} {ops[1]} {c}"}


def _draw_warehouse(rng: random.Random) -> dict[str, Any]:
    n, k, m = _n(rng, 12, 999), _n(rng, 12, 99), _n(rng, 12, 99)
    return {"n": n, "k": k, "m": m, "s": _n(rng, 100, n * k * m - 1)}


def _draw_savings(rng: random.Random) -> dict[str, Any]:
    a, b, d = _n(rng, 100, 9999), _n(rng, 12, 999), _n(rng, 12, 365)
    return {"name": rng.choice(NAMES), "a": a, "b": b, "d": d, "c": _n(rng, 100, min(9999, a + b * d - 1))}


def _draw_linear(rng: random.Random) -> dict[str, Any]:
    a, x, b = _n(rng, 12, 99), _n(rng, 100, 9999), _n(rng, 100, 99999)
    return {"a": a, "b": b, "c": a * x + b}


def _draw_sum_range(rng: random.Random) -> dict[str, Any]:
    a = _n(rng, 10, 999)
    return {"a": a, "b": _n(rng, a + 50, a + 5000)}


def _draw_remainder(rng: random.Random) -> dict[str, Any]:
    return {"a": _n(rng, 100, 9999), "b": _n(rng, 100, 9999), "m": _n(rng, 13, 97)}


def _draw_plot(rng: random.Random) -> dict[str, Any]:
    w, h = _n(rng, 100, 999), _n(rng, 100, 999)
    return {"w": w, "h": h, "s": _n(rng, 10, min(w, h) - 1)}


TEMPLATES: dict[str, Template] = {
    t.name: t
    for t in (
        Template(
            "expression",
            ("What is {expr}?", "Compute {expr}.", "Calculate the value of {expr}."),
            _draw_expression,
            lambda o: str(o["expr"]),
        ),
        Template(
            "chain",
            ("Evaluate {expr}.", "Work out {expr}.", "Find the value of {expr}."),
            _draw_chain,
            lambda o: str(o["expr"]),
        ),
        Template(
            "warehouse",
            (
                "A warehouse holds {n} crates. Each crate contains {k} boxes and each box holds {m} bolts. "
                "Then {s} bolts are shipped out. How many bolts remain in the warehouse?",
                "There are {n} crates with {k} boxes in each crate and {m} bolts in each box. "
                "If {s} bolts are removed, how many bolts are left?",
            ),
            _draw_warehouse,
            lambda o: f"{o['n']} * {o['k']} * {o['m']} - {o['s']}",
        ),
        Template(
            "savings",
            (
                "{name} has {a} coins. {name} earns {b} coins every day for {d} days and then spends "
                "{c} coins. How many coins does {name} have now?",
                "{name} starts with {a} coins, saves {b} coins per day for {d} days, then pays {c} coins "
                "for a bike. How many coins are left?",
            ),
            _draw_savings,
            lambda o: f"{o['a']} + {o['b']} * {o['d']} - {o['c']}",
        ),
        Template(
            "linear",
            ("Solve for x: {a} * x + {b} = {c}.", "Find the integer x such that {a}x + {b} = {c}."),
            _draw_linear,
            lambda o: f"({o['c']} - {o['b']}) // {o['a']}",
        ),
        Template(
            "sum_range",
            (
                "What is the sum of all integers from {a} to {b}?",
                "Add up every whole number from {a} through {b}. What is the total?",
            ),
            _draw_sum_range,
            lambda o: f"sum(range({o['a']}, {o['b']} + 1))",
        ),
        Template(
            "remainder",
            (
                "What is the remainder when {a} * {b} is divided by {m}?",
                "Multiply {a} by {b}. What remainder does the product leave when divided by {m}?",
            ),
            _draw_remainder,
            lambda o: f"({o['a']} * {o['b']}) % {o['m']}",
        ),
        Template(
            "plot",
            (
                "A rectangular field is {w} m long and {h} m wide. A square pond with sides of {s} m is "
                "dug in it. How many square metres of the field are not covered by the pond?",
                "A garden measures {w} m by {h} m. A square shed of side {s} m stands in it. "
                "What area, in square metres, is left for plants?",
            ),
            _draw_plot,
            lambda o: f"{o['w']} * {o['h']} - {o['s']} * {o['s']}",
        ),
    )
}

DEFAULT_TEMPLATES: tuple[str, ...] = tuple(sorted(name for name in TEMPLATES if name != "chain"))

_FIELD = re.compile(r"\{(\w+)\}")
_GROUPS = {"expr": r"[0-9+\-*() ]+?", "name": r"[A-Z][a-z]+"}


def _phrasing_regex(phrasing: str) -> re.Pattern[str]:
    parts: list[str] = []
    seen: set[str] = set()
    pos = 0
    for m in _FIELD.finditer(phrasing):
        parts.append(re.escape(phrasing[pos : m.start()]))
        field = m.group(1)
        if field in seen:
            parts.append(f"(?P={field})")
        else:
            seen.add(field)
            parts.append(f"(?P<{field}>{_GROUPS.get(field, r'-?[0-9]+')})")
        pos = m.end()
    parts.append(re.escape(phrasing[pos:]))
    return re.compile("".join(parts))


_PATTERNS: list[tuple[str, int, re.Pattern[str]]] = [
    (t.name, i, _phrasing_regex(p)) for t in TEMPLATES.values() for i, p in enumerate(t.phrasings)
]


def evaluate(expression: str) -> int:
    """The integer value of a structure's ``expression`` (only literals, + - * // % and sum/range)."""
    if not re.fullmatch(r"[0-9+\-*/%() ,a-z]*", expression) or re.search(
        r"[a-z]+", re.sub(r"\b(sum|range)\b", "", expression)
    ):
        raise ValueError(f"not a synthetic arithmetic expression: {expression!r}")
    # Safe: only integer literals, operators and the two whitelisted names get past the check above.
    value = eval(expression, {"__builtins__": {}}, {"sum": sum, "range": range})
    return int(value)


def structure_of(template: str, variant: int, operands: dict[str, Any]) -> dict[str, Any]:
    t = TEMPLATES[template]
    return {
        "template": template,
        "variant": variant,
        "operands": dict(operands),
        "expression": t.expression(operands),
    }


def parse_question(question: str) -> dict[str, Any]:
    """Invert the templates: the structure (template, variant, operands, expression) of ``question``.

    Raises ``ValueError`` when the question comes from no template.
    """
    q = question.strip()
    for name, variant, pattern in _PATTERNS:
        m = pattern.fullmatch(q)
        if m is None:
            continue
        operands: dict[str, Any] = {
            k: (v if k in _GROUPS else int(v)) for k, v in m.groupdict().items() if v is not None
        }
        return structure_of(name, variant, operands)
    raise ValueError(f"not a synthetic arithmetic question: {question[:120]!r}")


@dataclasses.dataclass(frozen=True)
class _Candidate:
    question: str
    split_key: str
    structure: dict[str, Any]
    answer: int

    @property
    def dedup_key(self) -> str:
        return self.split_key


def check_templates(templates: tuple[str, ...] | None) -> tuple[str, ...]:
    """The templates to draw from, sorted (``None`` = :data:`DEFAULT_TEMPLATES`); unknown names raise."""
    if templates is None:
        return DEFAULT_TEMPLATES
    unknown = sorted(set(templates) - set(TEMPLATES))
    if unknown or not templates:
        raise SyntheticError(
            f"unknown arithmetic template(s) {unknown or '(none given)'}; "
            f"choose from {', '.join(sorted(TEMPLATES))}"
        )
    return tuple(sorted(set(templates)))


def _candidate(rng: random.Random, templates: tuple[str, ...] = DEFAULT_TEMPLATES) -> _Candidate:
    template = rng.choice(templates)
    t = TEMPLATES[template]
    variant = rng.randrange(len(t.phrasings))
    operands = t.draw(rng)
    structure = structure_of(template, variant, operands)
    question = t.phrasings[variant].format(**operands)
    answer = evaluate(structure["expression"])
    return _Candidate(question, f"{FAMILY}|{template}|{structure['expression']}", structure, answer)


def generate_rows(
    n: int, seed: int, split: Split, templates: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    chosen = check_templates(templates)
    rng = rng_for(FAMILY, seed, split)
    cands = draw_unique(rng, n, split, lambda r: _candidate(r, chosen), what=FAMILY)
    return [
        task_row(
            family_name=FAMILY,
            task_family=TASK_FAMILY,
            split=split,
            index=i,
            seed=seed,
            question=c.question,
            gold_answers=[str(c.answer)],
            structure=c.structure,
        )
        for i, c in enumerate(cands)
    ]


def generate(
    n: int, seed: int = 0, split: Split = "train", templates: tuple[str, ...] | None = None
) -> pa.Table:
    """``n`` tasks of ``split`` as ``task.v1``, drawn from ``templates`` (default: all but chain)."""
    return to_table(generate_rows(n, seed, split, templates))
