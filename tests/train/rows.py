"""Small ``sft.v1`` tables built through the format module: arithmetic solved with code.

Each trajectory is ``plan, think, code, observation, reflection, think, answer`` (the
``code_math`` grammar), rendered by :func:`coa.format.render`; the observation holds what the code
prints.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa

import schemas
from coa.format import Trajectory, observation_spans, render, validate

SYSTEM = "Solve the task with tools. Write plan, think, code, reflection and answer blocks."
OPS = ("+", "-", "*")


def arith_trajectory(a: int, op1: str, b: int, op2: str, c: int) -> tuple[str, Trajectory]:
    expr = f"{a} {op1} {b} {op2} {c}"
    value = eval(expr)  # noqa: S307 - three integers and two operators built above
    question = f"What is {expr}?"
    t = Trajectory.of(
        [
            ("plan", f"Compute {expr} with Python and report the result."),
            ("think", "Run the expression."),
            ("code", f"```py\nprint({expr})\n```"),
            ("observation", str(value)),
            ("reflection", f"The program printed {value}, the value of {expr}."),
            ("think", "Report it."),
            ("answer", f"\\boxed{{{value}}}"),
        ]
    )
    assert validate(t, "code_math").ok
    return question, t


def sft_row(i: int, question: str, t: Trajectory, system: str = SYSTEM) -> dict[str, Any]:
    content = render(t)
    return {
        "example_id": f"ex{i}@code_math",
        "task_id": f"task{i}",
        "run_id": f"run{i}",
        "family": "math",
        "variant": "code_math",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
            {"role": "assistant", "content": content},
        ],
        "observation_spans": [{"start": a, "end": b} for a, b in observation_spans(content)],
        "n_tokens": len(content) // 4,
        "tokenizer": "approx",
        "prompt_version": "test-v1",
    }


def arith_rows(n: int, seed: int = 0) -> pa.Table:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b, c = (rng.randint(10, 999) for _ in range(3))
        question, t = arith_trajectory(a, rng.choice(OPS), b, rng.choice(OPS), c)
        rows.append(sft_row(i, question, t))
    return schemas.SFT.from_rows(rows)
