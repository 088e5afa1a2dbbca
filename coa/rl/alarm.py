"""The reward-hacking alarm: a rising training reward with a falling held-out score.

A policy that learns to please the reward rather than to solve the task shows it as two curves
that part: the training reward (what the optimizer sees) goes up while the score on prompts it
never trains on (greedy rollouts, the task's own check) goes down. :func:`reward_hacking_alarm`
is the rule, a pure function of the two curves:

1. take the last ``window`` held-out evaluations (at least two), from step ``s0`` to step ``s1``;
2. the held-out **drop** is minus the change a least-squares line through those points makes
   from ``s0`` to ``s1``; the training **rise** is the change of a least-squares line through the
   training rewards logged at steps ``s0 <= step <= s1`` (at least two of them);
3. the alarm fires when ``rise >= min_rise`` and ``drop >= min_drop``, each strictly above 0.

Fitted lines rather than end points, so one noisy batch reward or one flipped held-out prompt does
not decide alone; a window rather than the whole run, so a late turn is seen after early progress.
"""

from __future__ import annotations

from collections.abc import Sequence

Point = tuple[float, float]
"""``(step, value)``."""


def fitted_change(points: Sequence[Point]) -> float:
    """The change from the first to the last step of a least-squares line through ``points``."""
    n = len(points)
    if n < 2:
        return 0.0
    xs = [float(s) for s, _ in points]
    ys = [float(v) for _, v in points]
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope * (max(xs) - min(xs))


def reward_hacking_alarm(
    train: Sequence[Point],
    heldout: Sequence[Point],
    window: int = 3,
    min_rise: float = 0.05,
    min_drop: float = 0.05,
) -> str | None:
    """The alarm's message when the training reward rose while the held-out score fell (see the
    module docstring for the rule), else None. ``train``: (step, mean training reward) per logged
    step; ``heldout``: (step, held-out score) per evaluation."""
    if window < 2:
        raise ValueError("window must be at least 2 held-out evaluations")
    recent = sorted(heldout)[-window:]
    if len(recent) < 2:
        return None
    s0, s1 = recent[0][0], recent[-1][0]
    span = [p for p in sorted(train) if s0 <= p[0] <= s1]
    if len(span) < 2:
        return None
    rise, drop = fitted_change(span), -fitted_change(recent)
    if rise <= 0 or drop <= 0 or rise < min_rise or drop < min_drop:
        return None
    return (
        f"reward-hacking alarm at step {s1:g}: the training reward rose by {rise:+.3f} over steps "
        f"{s0:g}-{s1:g} while the held-out score fell by {drop:.3f} ({recent[0][1]:.3f} -> "
        f"{recent[-1][1]:.3f} over {len(recent)} evaluations); the policy is learning the reward, not "
        "the task: check the reward terms (format weight, judge) against the rollouts"
    )
