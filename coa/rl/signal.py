"""What an RL run had to learn from: how many of its groups held a correct episode.

GRPO learns from the differences within a group. A group whose episodes are all wrong teaches only
the small shaping terms (format, efficiency, overlong); when *no* group held a correct episode, the
run could not have raised accuracy, whatever its length or learning rate. That is what happens when
RL starts from a model that solves none of the family's tasks (the demo's 0.9M student on code), and
it is worth a warning rather than a silent flat curve: RL needs a family the model already solves
sometimes (a non-zero pass rate), or more SFT first.

:func:`learning_signal` reads a ``rollout.v1`` table (every episode generated, kept or dropped) and
the family of each prompt (from the ``rl_prompt.v1`` table).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from coa.rl.summary import LearningSignal


def learning_signal(rollouts: pa.Table, family_of: Mapping[str, str]) -> LearningSignal:
    """Per run and per family: episodes, share correct, groups, groups with a correct episode, and
    groups whose episodes differ in correctness (the ones that teach accuracy).

    A group is one generation batch's prompt: (``step``, ``group``); ``family_of`` maps a
    ``prompt_id`` to its family (unknown ones count as ``"?"``). ``warning`` is a sentence when no
    group held a correct episode, else None."""
    cols = rollouts.select(["prompt_id", "step", "group", "correct"]).to_pydict()
    groups: dict[tuple[str, int, int], list[bool]] = defaultdict(list)
    for pid, step, group, correct in zip(*(cols[k] for k in cols), strict=True):
        groups[(family_of.get(pid, "?"), step, group)].append(bool(correct))

    def summary(keys: list[tuple[str, int, int]]) -> dict[str, Any]:
        episodes = [c for k in keys for c in groups[k]]
        solved = sum(any(groups[k]) for k in keys)
        mixed = sum(any(groups[k]) and not all(groups[k]) for k in keys)
        return {
            "episodes": len(episodes),
            "correct_share": sum(episodes) / len(episodes) if episodes else 0.0,
            "groups": len(keys),
            "groups_with_a_correct_episode": solved,
            "mixed_groups": mixed,
        }

    out = summary(list(groups))
    out["families"] = {
        fam: summary([k for k in groups if k[0] == fam]) for fam in sorted({k[0] for k in groups})
    }
    warning = (
        f"no RL rollout was correct ({out['episodes']:,} episodes in {out['groups']:,} groups): the run "
        "learned only from the shaping terms (format, efficiency, overlong) and could not raise accuracy. "
        "RL needs a family the starting model solves sometimes: train it further with SFT first, or pick "
        "another family (rl.families)"
        if out["groups"] and not out["groups_with_a_correct_episode"]
        else None
    )
    return LearningSignal(**out, warning=warning)
