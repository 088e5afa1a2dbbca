"""The reward-hacking rule on synthetic curves, the held-out split, and the alarm on the figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa.rl.alarm import fitted_change, reward_hacking_alarm
from coa.rl.curves import alarm_step, plot_curves
from coa.rl.heldout import split_prompts

from .helpers import prompts_table

RISING = [(float(s), 0.1 + 0.05 * s) for s in range(1, 13)]  # 0.15 -> 0.70 over 12 steps
FLAT = [(float(s), 0.4 + (0.02 if s % 2 else -0.02)) for s in range(1, 13)]  # noise around 0.4


def test_rising_reward_with_falling_heldout_fires() -> None:
    heldout = [(0.0, 0.5), (4.0, 0.45), (8.0, 0.35), (12.0, 0.25)]
    message = reward_hacking_alarm(RISING, heldout, window=3)
    assert message is not None and message.startswith("reward-hacking alarm at step 12:")
    assert "over steps 4-12" in message and "0.450 -> 0.250" in message
    assert alarm_step(message) == 12.0


@pytest.mark.parametrize(
    ("train", "heldout", "why"),
    [
        (RISING, [(0.0, 0.3), (4.0, 0.35), (8.0, 0.4), (12.0, 0.5)], "held-out rises with the reward"),
        (FLAT, [(0.0, 0.5), (4.0, 0.4), (8.0, 0.3), (12.0, 0.2)], "held-out falls but the reward is flat"),
        (RISING, [(0.0, 0.5), (4.0, 0.5), (8.0, 0.49), (12.0, 0.5)], "held-out flat (one prompt's noise)"),
        (RISING, [(0.0, 0.5)], "one held-out point: no trend yet"),
        ([(1.0, 0.1)], [(0.0, 0.5), (12.0, 0.2)], "one training point in the window"),
        # the fall is old: the last window (steps 4-12) recovers, so a late alarm would be stale
        (RISING, [(0.0, 0.9), (4.0, 0.3), (8.0, 0.35), (12.0, 0.4)], "held-out recovered in the window"),
    ],
)
def test_the_rule_stays_quiet(
    train: list[tuple[float, float]], heldout: list[tuple[float, float]], why: str
) -> None:
    assert reward_hacking_alarm(train, heldout, window=3) is None, why


def test_thresholds_gate_small_moves() -> None:
    heldout = [(0.0, 0.5), (6.0, 0.47), (12.0, 0.44)]  # a 0.06 fall
    assert reward_hacking_alarm(RISING, heldout, window=3, min_drop=0.05) is not None
    assert reward_hacking_alarm(RISING, heldout, window=3, min_drop=0.1) is None
    assert reward_hacking_alarm(RISING, heldout, window=3, min_rise=1.0) is None
    assert fitted_change([(0.0, 1.0), (2.0, 0.0), (4.0, 0.0)]) == pytest.approx(-1.0)


def test_heldout_prompts_are_whole_tasks_kept_out_of_training() -> None:
    rows = prompts_table(10).to_pylist()
    rows += [{**r, "prompt_id": r["prompt_id"] + "#2", "group_index": 100 + i} for i, r in enumerate(rows)]
    train, heldout = split_prompts(rows, 0.2, 32)
    assert len(heldout) == 4 and len(train) == 16  # two tasks, both prompts of each
    assert not {r["task_id"] for r in train} & {r["task_id"] for r in heldout}
    assert split_prompts(rows, 0.2, 32) == (train, heldout)  # deterministic (resume holds out the same)
    assert len(split_prompts(rows, 0.5, 2)[1]) == 2  # capped


def test_the_figure_shows_the_heldout_panel_and_the_alarm(tmp_path: Path) -> None:
    points = [{"step": s, "reward": r, "entropy": 1.0} for s, r in RISING]
    heldout = [
        {"step": s, "correct": c, "format_valid": 1.0} for s, c in [(0.0, 0.5), (6.0, 0.4), (12.0, 0.2)]
    ]
    alarm = reward_hacking_alarm(RISING, [(p["step"], p["correct"]) for p in heldout])
    assert alarm is not None
    quiet = plot_curves(points, tmp_path / "quiet.png", "run")
    loud = plot_curves(points, tmp_path / "alarm.png", "run", heldout=heldout, alarm=alarm)
    from PIL import Image

    assert Image.open(quiet).size[0] < Image.open(loud).size[0]  # a fourth panel
    red = sum(1 for r, g, b, *_ in Image.open(loud).convert("RGB").getdata() if r > 200 and g < 60 and b < 60)
    assert red > 100  # the alarm line and headline are drawn in red
