"""The learning signal of an RL run: groups that held a correct episode, and the warning when none did."""

from __future__ import annotations

import pyarrow as pa

from coa.rl.signal import learning_signal


def rollouts(rows: list[tuple[str, int, int, bool]]) -> pa.Table:
    """(prompt_id, step, group, correct) rows: the columns learning_signal reads."""
    pid, step, group, correct = (list(c) for c in zip(*rows, strict=True))
    return pa.table({"prompt_id": pid, "step": step, "group": group, "correct": correct})


FAMILY = {"c1": "code", "c2": "code", "m1": "math"}


def test_counts_groups_per_family_and_step() -> None:
    table = rollouts([
        ("c1", 0, 1, False), ("c1", 0, 1, True),   # mixed: teaches accuracy
        ("c2", 0, 2, False), ("c2", 0, 2, False),  # all wrong
        ("c1", 2, 1, True), ("c1", 2, 1, True),    # the same prompt at a later step: another group, all right
        ("m1", 0, 3, True), ("m1", 0, 3, False),   # mixed
    ])  # fmt: skip
    s = learning_signal(table, FAMILY)
    assert (s.episodes, s.groups, s.groups_with_a_correct_episode, s.mixed_groups) == (8, 4, 3, 2)
    assert s.correct_share == 4 / 8 and s.warning is None
    code = s.families["code"]
    assert (code["groups"], code["groups_with_a_correct_episode"], code["mixed_groups"]) == (3, 2, 1)
    assert s.families["math"]["correct_share"] == 0.5


def test_warns_when_no_group_held_a_correct_episode() -> None:
    table = rollouts([("c1", 0, 1, False), ("c1", 0, 1, False), ("c2", 2, 2, False), ("x", 2, 9, False)])
    s = learning_signal(table, FAMILY)
    assert s.groups_with_a_correct_episode == 0 and s.families.keys() == {"code", "?"}
    assert s.warning is not None
    assert s.warning.startswith("no RL rollout was correct (4 episodes in 3 groups)")
    assert "rl.families" in s.warning


def test_an_empty_run_has_no_warning() -> None:
    empty = pa.table({"prompt_id": pa.array([], pa.string()), "step": pa.array([], pa.int32()),
                      "group": pa.array([], pa.int64()), "correct": pa.array([], pa.bool_())})  # fmt: skip
    s = learning_signal(empty, FAMILY)
    assert s.groups == 0 and s.correct_share == 0.0 and s.warning is None
