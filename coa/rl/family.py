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

Only families the policy can act on are candidates: a family whose prompts' grammar variants call
tools (:attr:`coa.format.grammar.Grammar.tools`) none of which ``rl.tools.enabled`` turns on is left
out, with the reason recorded (the demo's RL enables only ``code``, so its multi-hop search prompts,
which need ``wiki_search``, are not candidates however weak the family is).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import pyarrow as pa

from coa.format.grammar import grammar
from coa.pages import percent_by_family
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


def unreachable_families(
    variants: Mapping[str, Collection[str]], enabled_tools: Collection[str]
) -> dict[str, str]:
    """Family → why, for the families whose prompts need tools the policy does not have.

    ``variants`` maps each family of the RL prompts to the grammar variants of its prompts. A family
    is unreachable when every one of its variants calls tools and none of them is in
    ``enabled_tools``; a variant that calls no tool, or one enabled tool, keeps the family.
    """
    enabled = set(enabled_tools)
    out: dict[str, str] = {}
    for family, names in sorted(variants.items()):
        needs = {name: set(grammar(name).tools) for name in sorted(set(names))}
        if needs and all(tools and not tools & enabled for tools in needs.values()):
            wanted = sorted(set().union(*needs.values()))
            has = ", ".join(sorted(enabled)) or "none"
            out[family] = f"its prompts call {', '.join(wanted)}; rl.tools.enabled has {has}"
    return out


def pick_family(
    evaluation: pa.Table, prompt_families: Iterable[str], unreachable: Mapping[str, str] | None = None
) -> FamilyChoice:
    """The family to train on, the accuracies that decided it, the rule and a warning (see the module).

    ``unreachable`` (family → why, :func:`unreachable_families`) names families that are not candidates
    although they have prompts."""
    families = set(prompt_families)
    skipped = {f: why for f, why in (unreachable or {}).items() if f in families}
    available = families - set(skipped)
    scores = {f: s for f, s in accuracy_by_family(evaluation).items() if f in available}
    if not scores:
        left_out = "".join(f"; {f} left out: {why}" for f, why in sorted(skipped.items()))
        raise RLError(
            f"rl.families: auto found no family both evaluated and among the RL prompts (evaluated: "
            f"{sorted(accuracy_by_family(evaluation))}, prompts: {sorted(available)}{left_out}); name the "
            "families (rl.families: [math]) or enable the tools they call (rl.tools.enabled)"
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
    return FamilyChoice(family=family, accuracy=accuracy, rule=rule, warning=warning, excluded=skipped)
