"""What each training step changed: every model against the one it started from, paired on the same
held-out tasks (SFT against the student before it, each round against the model before it, RL against
the last round), per family, with a bootstrap interval (:func:`coa.evaluate.compare.compare`).

The training report (:mod:`coa.evaluate.training_report`) shows it as a table and a panel per step;
``coa run`` prints :func:`format_changes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from coa import pages
from coa.evaluate.compare import compare
from coa.evaluate.metrics import aligned_table
from coa.evaluate.summary import StepChange


def step_changes(
    evaluations: Sequence[tuple[str, pa.Table]], samples: int = 2000, confidence: float = 0.95
) -> list[StepChange]:
    """Each model's change in accuracy from the model before it, paired task by task, per family.

    ``evaluations``: (model name, its ``eval.v1`` rows) in training order (before SFT, SFT, round 2…,
    RL), all on the same held-out tasks. A change is a :class:`~coa.evaluate.compare.Delta` per family
    and over all, with its bootstrap interval: on 50 tasks a column of the table moves by several
    points with the draw of tasks alone, and the interval says whether a step's change is more.
    """

    def by_family(rows: pa.Table) -> pa.Table:  # compare() groups by benchmark, the report by family
        return rows.select(["task_id", "sample_index", "family", "correct"]).rename_columns(
            ["task_id", "sample_index", "benchmark", "correct"]
        )

    return [
        StepChange(
            step=name,
            against=before,
            deltas=compare(by_family(rows), by_family(base), "correct", samples, confidence, seed=0),
        )
        for (before, base), (name, rows) in zip(evaluations, evaluations[1:], strict=False)
    ]


CHANGES_LEGEND = (
    "points of accuracy, paired on the same tasks; [95% bootstrap interval]; * the interval excludes 0"
)


def changes_cells(changes: Sequence[StepChange]) -> list[list[str]]:
    """The steps' changes as cells, the header first: a row per family, a column per step."""
    families = list(dict.fromkeys(f for c in changes for f in c.deltas))
    lines = [["family", "tasks", *(f"{c.step} vs {c.against}" for c in changes)]]
    for family in families:
        cells = [c.deltas.get(family) for c in changes]
        pairs = max((d.pairs for d in cells if d is not None), default=0)
        lines.append(
            [family, str(pairs)]
            + ["-" if d is None else d.points() + (" *" if d.excludes_zero else "") for d in cells]
        )
    return lines


def format_changes(changes: Sequence[StepChange]) -> str:
    """The steps' changes as an aligned plain-text table."""
    return aligned_table(changes_cells(changes))


def changes_plot(changes: Sequence[StepChange]) -> str:
    """A panel per step: each family's change in points with its interval, a line at 0."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = max(len(c.deltas) for c in changes)
    fig = Figure(figsize=(3.6 * len(changes) + 0.6, 0.45 * rows + 1.4), dpi=100)
    FigureCanvasAgg(fig)
    for k, change in enumerate(changes):
        ax = fig.add_subplot(1, len(changes), k + 1)
        names = list(change.deltas)[::-1]  # top to bottom in the table's order
        for y, family in enumerate(names):
            d = change.deltas[family]
            color = "#2ca02c" if d.low > 0 else "#d62728" if d.high < 0 else "#7f7f7f"
            ax.errorbar(
                100 * d.delta,
                y,
                xerr=[[100 * (d.delta - d.low)], [100 * (d.high - d.delta)]],
                fmt="o",
                color=color,
                capsize=3,
            )
        ax.axvline(0, color="#333333", linewidth=0.8)
        ax.set_yticks(range(len(names)), names if k == 0 else [""] * len(names))
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.set_title(f"{change.step} vs {change.against}", fontsize=10)
        ax.set_xlabel("points")
        ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return pages.png(fig, dpi=100)
