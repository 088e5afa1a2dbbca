"""The RL run's curves: reward per term, entropy, zero-variance share per logged step, and their plot."""

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


def plot_curves(points: Sequence[dict[str, float]], path: Path, title: str) -> Path:
    """Reward (total and per term), entropy and zero-variance share against the step."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    panels = (
        ("reward", ["reward", *(f"rewards/{t}/mean" for t in TERMS)]),
        ("entropy (nats/token)", ["entropy"]),
        ("share of groups", ["dynamic/zero_variance_share"]),
    )
    for i, (label, keys) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
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
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(str(path))
    return path
