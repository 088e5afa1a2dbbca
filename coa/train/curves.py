"""The SFT run's curves: the training and held-out loss from the trainer's log, the overfitting
warning, and the loss-curve PNG (matplotlib's Agg canvas, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def loss_curve(log_history: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(step, loss)`` of every training log entry, in step order, one per step."""
    points = {int(e["step"]): float(e["loss"]) for e in log_history if "loss" in e and "step" in e}
    return sorted(points.items())


def heldout_curve(log_history: Sequence[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(step, held-out loss)`` of every held-out evaluation, in step order."""
    points = {int(e["step"]): float(e["heldout_loss"]) for e in log_history if "heldout_loss" in e}
    return sorted(points.items())


def plot_loss_curve(
    points: Sequence[tuple[int, float]],
    path: str | Path,
    title: str = "SFT loss",
    heldout: Sequence[tuple[int, float]] = (),
) -> Path:
    """Write the loss curve (and the held-out loss) as a PNG (matplotlib's Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if points:
        steps, losses = zip(*points, strict=True)
        ax.plot(steps, losses, marker="." if len(points) < 50 else None, linewidth=1.2, label="training")
        if min(losses) > 0 and max(losses) / min(losses) > 20:
            ax.set_yscale("log")
    if heldout:
        steps, losses = zip(*heldout, strict=True)
        ax.plot(steps, losses, marker="o", linewidth=1.6, color="#d62728", label="held-out")
        ax.legend(loc="upper right")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (per trained token)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(path))
    return Path(path)


def overfit_warning(train: Sequence[tuple[int, float]], heldout: Sequence[tuple[int, float]]) -> str | None:
    """A warning when the held-out loss rose (10%+ over its best) while the training loss fell."""
    if len(heldout) < 3 or not train:
        return None
    best_step, best = min(heldout, key=lambda p: p[1])
    last_step, last = heldout[-1]
    if last <= best * 1.1 or last_step == best_step:
        return None

    def train_at(step: int) -> float:
        return min(train, key=lambda p: abs(p[0] - step))[1]

    if train_at(last_step) >= train_at(best_step):
        return None
    return (
        f"held-out loss rose from {best:.4f} (step {best_step}) to {last:.4f} (step {last_step}) while the "
        f"training loss fell from {train_at(best_step):.4f} to {train_at(last_step):.4f}: the model is "
        "memorising its examples; use fewer steps, more data or regularisation"
    )
