"""``rl.families: auto``: train RL on the family the SFT model leaves weakest but solves sometimes.

GRPO learns accuracy only from groups that mix right and wrong episodes (:mod:`coa.rl.signal`). A
family the SFT model never solves gives none (the demo's 0.9M student on code: 0 correct in 23
steps); one it always solves gives none either (every group all-correct, dropped by dynamic
sampling). So the pick reads the SFT model's held-out evaluation (``eval.v1``: one row per task and
sample, ``family`` and ``correct``) and takes, among the families that have RL prompts, the one with
the **lowest accuracy above 0 and below 1**. When no family is in that range it falls back to the
family with the highest accuracy below 1, ties broken by the larger format-valid share (sampled
rollouts at temperature 1 may still solve a task greedy decoding missed, more likely where the model
at least writes the format: the demo's code at 0% accuracy but 62% valid, not its untrained mhqa at
0% valid), and when every family is solved, to the first by name; either fallback comes with a
``warning``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from coa.evaluate.metrics import percent_by_family
from coa.rl.config import RLError
from coa.rl.summary import FamilyChoice

EVAL_COLUMNS = ("family", "correct", "format_valid")
"""The ``eval.v1`` columns the pick reads (the RL step reads only these)."""


def accuracy_by_family(evaluation: pa.Table) -> dict[str, dict[str, Any]]:
    """Family → {tasks (rows), correct, accuracy, format_valid (share; 0 without the column)} of an
    ``eval.v1`` table."""
    cols = evaluation.select(["family", "correct"]).to_pydict()
    valid = (
        evaluation.column("format_valid").to_pylist()
        if "format_valid" in evaluation.column_names
        else [False] * evaluation.num_rows
    )
    out: dict[str, dict[str, Any]] = {}
    for family, correct, ok in zip(cols["family"], cols["correct"], valid, strict=True):
        row = out.setdefault(str(family), {"tasks": 0, "correct": 0, "valid": 0})
        row["tasks"] += 1
        row["correct"] += bool(correct)
        row["valid"] += bool(ok)
    for row in out.values():
        row["accuracy"] = row["correct"] / row["tasks"]
        row["format_valid"] = row.pop("valid") / row["tasks"]
    return dict(sorted(out.items()))


def pick_family(evaluation: pa.Table, prompt_families: Iterable[str]) -> FamilyChoice:
    """The family to train on, the accuracies that decided it, the rule and a warning (see the module)."""
    available = set(prompt_families)
    scores = {f: s for f, s in accuracy_by_family(evaluation).items() if f in available}
    if not scores:
        raise RLError(
            f"rl.families: auto found no family both evaluated and among the RL prompts (evaluated: "
            f"{sorted(accuracy_by_family(evaluation))}, prompts: {sorted(available)}); name the "
            "families (rl.families: [math])"
        )
    accuracy = {f: s["accuracy"] for f, s in scores.items()}
    valid = {f: s["format_valid"] for f, s in scores.items()}
    learnable = [f for f, a in accuracy.items() if 0 < a < 1]
    warning = None
    if learnable:
        family = min(learnable, key=lambda f: (accuracy[f], f))
        rule = "lowest held-out accuracy above 0 and below 1"
    else:
        unsolved = [f for f, a in accuracy.items() if a < 1]
        family = max(unsolved, key=lambda f: (accuracy[f], valid[f], f)) if unsolved else min(accuracy)
        rule = "no family between 0 and 1: " + (
            "the highest accuracy below 1, then the most format-valid"
            if unsolved
            else "every family solved, the first by name"
        )
        warning = (
            "rl.families: auto found no family the SFT model solves sometimes "
            f"({percent_by_family(accuracy)}); "
            f"RL trains on {family}, where GRPO may have nothing to learn from (see the learning signal)"
        )
    return FamilyChoice(family=family, accuracy=accuracy, rule=rule, warning=warning)
