"""Small programming tasks with stdin/stdout tests (family ``code``).

Each task asks for a complete Python program that reads standard input and prints the answer, for
one parameterised spec (:data:`SPECS`, :mod:`coa.synthetic.program_specs`: digit sums in a base,
reversing words, counting vowels or one letter, FizzBuzz variants, run-length encoding, sums of
multiples, Caesar shifts, list rotation, …). The expected outputs of the ``stdin`` test cases are
computed by running the spec's reference program (:func:`reference_solution`, only ``input()`` and
``print()``) on generated inputs, the first of which is shown in the question as an example.

The structure :func:`parse_question` returns (and the metadata stores) is
``{"template": spec_id, "spec": spec_id, "params": {...}}``; with it an offline teacher can write
the reference program (:func:`reference_solution`) as an LLM would write a solution.
"""

from __future__ import annotations

import builtins
import functools
import io
import json
import random
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from coa.synthetic._common import Split, SyntheticError, rng_for, split_of, task_row, to_table
from coa.synthetic.program_specs import SPECS, Params

FAMILY = "programming"
TASK_FAMILY = "code"

IO_NOTE = "Read from standard input and write to standard output."


def reference_solution(spec: str, params: Params) -> str:
    """The reference Python program for ``spec`` with ``params``."""
    return SPECS[spec].source(params)


def run_program(source: str, stdin: str) -> str:
    """Run a trusted ``input()``/``print()`` program on ``stdin`` in-process; return what it printed.

    Only for the reference programs of this module (no sandbox): ``input`` and ``print`` are
    replaced in the program's namespace, so nothing global (``sys.stdin``/``sys.stdout``) changes.
    """
    lines: Iterator[str] = iter(stdin.splitlines())
    out = io.StringIO()

    def _input(prompt: str = "") -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError("EOF when reading a line") from None

    def _print(*args: Any, sep: str | None = " ", end: str | None = "\n", **_: Any) -> None:
        out.write((" " if sep is None else sep).join(str(a) for a in args) + ("\n" if end is None else end))

    env: dict[str, Any] = {
        "__builtins__": {**vars(builtins), "input": _input, "print": _print},
        "__name__": "__main__",
    }
    exec(compile(source, "<reference>", "exec"), env)
    return out.getvalue()


def render_question(spec: str, params: Params, example_in: str, example_out: str) -> str:
    description = SPECS[spec].describe(params)
    return (
        f"{description} {IO_NOTE}\n\nExample input:\n{example_in.rstrip(chr(10))}\n\n"
        f"Example output:\n{example_out.rstrip(chr(10))}"
    )


@functools.lru_cache(maxsize=1)
def _descriptions() -> dict[str, tuple[str, Params]]:
    table: dict[str, tuple[str, Params]] = {}
    for spec in SPECS.values():
        for params in spec.space():
            text = spec.describe(params)
            if text in table:
                raise AssertionError(f"two programming specs share the description {text!r}")
            table[text] = (spec.id, params)
    return table


def structure_of(spec: str, params: Params) -> dict[str, Any]:
    return {"template": spec, "spec": spec, "params": dict(params)}


def parse_question(question: str) -> dict[str, Any]:
    """Invert the templates: ``{template, spec, params}`` of ``question``.

    Raises ``ValueError`` when the question comes from no spec.
    """
    first = question.strip().split("\n\n", 1)[0].strip()
    description = first.removesuffix(IO_NOTE).strip()
    found = _descriptions().get(description)
    if found is None:
        raise ValueError(f"not a synthetic programming question: {question[:120]!r}")
    return structure_of(*found)


def _problem_key(spec: str, params: Params) -> str:
    return f"{FAMILY}|{spec}|{json.dumps(params, sort_keys=True)}"


def problems(split: Split) -> list[tuple[str, Params]]:
    """Every ``(spec, params)`` problem of ``split``, in a fixed order."""
    return [
        (spec.id, params)
        for spec in SPECS.values()
        for params in spec.space()
        if split_of(_problem_key(spec.id, params)) == split
    ]


def _draw_problems(rng: random.Random, n: int, split: Split) -> list[tuple[str, Params]]:
    """``n`` distinct problems of ``split``, balanced over the specs (round-robin in a random order)."""
    per_spec: dict[str, list[Params]] = {}
    for spec, params in problems(split):
        per_spec.setdefault(spec, []).append(params)
    available = sum(len(v) for v in per_spec.values())
    if n > available:
        raise SyntheticError(f"{FAMILY}: only {available} unique {split} problems exist, {n} asked for")
    order = sorted(per_spec)
    rng.shuffle(order)
    for spec in order:
        rng.shuffle(per_spec[spec])
    out: list[tuple[str, Params]] = []
    while len(out) < n:
        for spec in order:
            if per_spec[spec] and len(out) < n:
                out.append((spec, per_spec[spec].pop()))
    return out


def generate_rows(n: int, seed: int, split: Split) -> list[dict[str, Any]]:
    rng = rng_for(FAMILY, seed, split)
    rows = []
    for i, (spec, params) in enumerate(_draw_problems(rng, n, split)):
        source = SPECS[spec].source(params)
        stdin = SPECS[spec].inputs(rng, params)
        expected = [run_program(source, s) for s in stdin]
        rows.append(
            task_row(
                family_name=FAMILY,
                task_family=TASK_FAMILY,
                split=split,
                index=i,
                seed=seed,
                question=render_question(spec, params, stdin[0], expected[0]),
                gold_answers=[],
                structure=structure_of(spec, params),
                test_cases={
                    "kind": "stdin",
                    "stdin": stdin,
                    "expected_output": expected,
                    "functional": None,
                    "fn_name": None,
                    "starter_code": None,
                },
            )
        )
    return rows


def generate(n: int, seed: int = 0, split: Split = "train") -> pa.Table:
    """``n`` programming tasks of ``split`` as a ``task.v1`` table."""
    return to_table(generate_rows(n, seed, split))
