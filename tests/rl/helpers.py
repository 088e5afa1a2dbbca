"""RL test pieces: rl_prompt.v1 rows, and a scripted policy whose samples of one prompt differ."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

import schemas
from coa.rollout import Codec, Generation, Sampling
from coa.rollout.policies.scripted import ScriptedPolicy
from tests.rollout.helpers import blocks, code_turn

SYSTEM = "Solve the task with tools. Write plan, think, code, reflection and answer blocks."


def math_prompt(i: int, a: int, b: int) -> dict[str, Any]:
    return {
        "prompt_id": f"m{i}@code_math",
        "task_id": f"m{i}",
        "family": "math",
        "variant": "code_math",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + {b}?"}],
        "gold_answers": [str(a + b)],
        "test_cases": None,
        "group_index": i,
        "teacher_pass_rate": 0.5,
        "n_teacher_runs": 2,
    }


def prompts_table(n: int) -> pa.Table:
    return schemas.RL_PROMPT.from_rows([math_prompt(i, 100 + i, 200 + 3 * i) for i in range(n)])


def answer(value: str) -> str:
    return blocks(
        ("reflection", f"It printed {value}."), ("think", "Answer."), ("answer", f"\\boxed{{{value}}}")
    )


class TwoTurnPolicy(ScriptedPolicy):
    """Per prompt ``What is a + b?``: turn 0 runs ``print(a + b)`` (a real tool call), turn 1 answers.

    The answer is right on every ``right_every``-th answer of a prompt and off by one otherwise
    (``right_every=0``: never right), so a group's rewards differ or are all equal as a test needs.
    """

    def __init__(
        self,
        codec: Codec,
        questions: Sequence[tuple[int, int]],
        right_every: int = 2,
        never_right: Sequence[tuple[int, int]] = (),
    ) -> None:
        replies = {f"What is {a} + {b}?": [code_turn(f"print({a} + {b})"), ""] for a, b in questions}
        super().__init__(codec, replies)
        self.right_every = right_every
        self.never_right = {f"What is {a} + {b}?" for a, b in never_right}
        self.answers: dict[str, int] = {}
        self.generations: list[Generation] = []

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        prompt = self.codec.decode(prompt_ids)
        if prompt.count("</observation>") == 0:
            generation = await super().generate(prompt_ids, max_new_tokens, sampling)
        else:
            key = next(k for k in self.replies if k in prompt)
            a, b = (int(x) for x in key.removeprefix("What is ").removesuffix("?").split(" + "))
            n = self.answers[key] = self.answers.get(key, 0) + 1
            right = self.right_every > 0 and n % self.right_every == 0 and key not in self.never_right
            ids = self.codec.encode(answer(str(a + b if right else a + b + 1)))
            generation = self.codec.cut(ids, [self.logprob] * len(ids), max_new_tokens)
        self.generations.append(generation)
        return generation
