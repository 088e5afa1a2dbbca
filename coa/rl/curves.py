"""The RL run's curves: reward per term, entropy, zero-variance share per logged step, and their plot.

With a held-out score (``heldout_eval_steps``) the figure gains a fourth panel, the held-out share
correct and format-valid per evaluation beside the training reward; a reward-hacking alarm
(:mod:`coa.rl.alarm`) is drawn on it (a red line at the step it fired, its headline in red).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coa.rl.rewards import TERMS

CURVE_KEYS = (
    "reward",
    *(f"rewards/{t}/mean" for t in TERMS),
    "entropy",
    "dynamic/zero_variance_share",
    "dynamic/shortfall_groups",
    "clip_ratio/high_mean",
    "clip_ratio/low_mean",
    "rollout/truncated_share",
    "rollout/tool_calls_mean",
    "rollout/wall_s",
    "rollout/tool_s",
    "rollout/hook_s",
    "async/staleness_mean",
    "async/staleness_max",
    "async/stale_dropped",
    "async/wait_s",
    "tis/weight_mean",
    "tis/capped_share",
    "step_time",
)


def curves(log_history: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """One point per training log: the step and the curve keys present."""
    points = []
    for entry in log_history:
        if "reward" not in entry:
            continue
        point = {"step": float(entry["step"])}
        point |= {k: float(entry[k]) for k in CURVE_KEYS if isinstance(entry.get(k), int | float)}
        points.append(point)
    return points


def alarm_step(alarm: str) -> float | None:
    """The step an alarm message names (``... alarm at step N: ...``)."""
    head = alarm.split(":", 1)[0]
    try:
        return float(head.rsplit(" ", 1)[-1])
    except ValueError:
        return None


def plot_curves(
    points: Sequence[dict[str, float]],
    path: Path,
    title: str,
    heldout: Sequence[dict[str, float]] = (),
    alarm: str | None = None,
) -> Path:
    """Reward (total and per term), entropy and zero-variance share against the step; the held-out
    score and the alarm when there are any."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = 4 if heldout else 3
    fig = Figure(figsize=(3.0 * n, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    panels = (
        ("reward", ["reward", *(f"rewards/{t}/mean" for t in TERMS)]),
        ("entropy (nats/token)", ["entropy"]),
        ("share of groups", ["dynamic/zero_variance_share"]),
    )
    if heldout:
        _heldout_panel(fig.add_subplot(1, n, 4), points, heldout, alarm)
    for i, (label, keys) in enumerate(panels):
        ax = fig.add_subplot(1, n, i + 1)
        for key in keys:
            xs = [p["step"] for p in points if key in p]
            if xs:
                ax.plot(
                    xs,
                    [p[key] for p in points if key in p],
                    marker=".",
                    linewidth=1.2,
                    label=key.split("/")[-2]
                    if "/" in key and key.startswith("rewards")
                    else key.split("/")[-1],
                )
        ax.set_xlabel("optimizer step")
        ax.set_title(label, fontsize=9)
        ax.grid(True, alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=6)
    if alarm:
        fig.suptitle(f"{title}\n{alarm.split(':', 1)[0].upper()}", fontsize=10, color="red")
    else:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(str(path))
    return path


def _heldout_panel(
    ax: Any, points: Sequence[dict[str, float]], heldout: Sequence[dict[str, float]], alarm: str | None
) -> None:
    steps = [p["step"] for p in heldout]
    ax.plot(steps, [p["correct"] for p in heldout], marker="o", linewidth=1.2, label="held-out correct")
    ax.plot(steps, [p["format_valid"] for p in heldout], marker=".", linewidth=1.0, label="held-out valid")
    train = [p for p in points if "reward" in p]
    if train:
        ax.plot([p["step"] for p in train], [p["reward"] for p in train], linewidth=0.8, alpha=0.6,
                label="training reward")  # fmt: skip
    at = alarm_step(alarm) if alarm else None
    if at is not None:
        ax.axvline(at, color="red", linewidth=1.5, label="alarm")
    ax.set_xlabel("optimizer step")
    ax.set_title(
        "held-out (greedy)" + (": ALARM" if alarm else ""), fontsize=9, color="red" if alarm else "black"
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=6)
