"""The trajectory data-quality report (self-contained HTML) and the Prefect markdown headline.

Both are pure functions of the typed statistics (:class:`coa.curate.stats.CurationStats`): the
current run's and, for the drift section, the previous run's. Plots are drawn with matplotlib's Agg
backend and embedded as base64 PNG, so the HTML file stands alone: turns per trajectory, step roles
by agent tag, tool error rate per tool, observation lengths, tokens per trajectory, filter reasons,
and drift versus the previous run (a table of metric deltas and overlaid histograms where both runs
have data).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

from coa import pages
from coa.curate.stats import CurationStats, DriftRow, Histogram, Metrics, ToolStats

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

DRIFT_METRICS = (
    "rows_in",
    "kept_rate",
    "correct_rate_input",
    "correct_rate_kept",
    "clean_end_rate_input",
    "mean_steps",
    "median_steps",
    "mean_tool_calls",
    "mean_tokens",
    "median_tokens",
    "tool_error_rate_input",
    "tool_error_rate_kept",
    "mean_observation_chars",
    "contaminated_rate",
    "duplicate_rate",
)
HIST_TITLES = {
    "n_steps": "turns (steps) per trajectory",
    "tokens": "tokens per trajectory",
    "n_tool_calls": "tool calls per trajectory",
    "observation_chars": "observation length (characters)",
}
_CURRENT, _INPUT, _PREVIOUS = "#1f77b4", "#c7c7c7", "#d62728"


# -- numbers -----------------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def _compact(n: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v >= 10 or v == int(v) else f"{v:.1f}{unit}"
    return str(n)


def drift_rows(
    stats: CurationStats, previous: CurationStats | None, warn: float = 0.25
) -> tuple[DriftRow, ...]:
    """Metric, previous, current, delta, relative delta and a ``flag`` past ``warn`` (relative)."""
    if previous is None:
        return ()
    rows = []
    for m in DRIFT_METRICS:
        a, b = _metric(previous.metrics, m), _metric(stats.metrics, m)
        if a is None and b is None:
            continue
        delta = b - a if a is not None and b is not None else None
        rel = delta / abs(a) if delta is not None and a else None
        flag = rel is not None and abs(rel) > warn
        rows.append(DriftRow(metric=m, previous=a, current=b, delta=delta, relative=rel, flag=flag))
    return tuple(rows)


def _metric(metrics: Metrics, name: str) -> int | float | None:
    value: int | float | None = getattr(metrics, name)  # DRIFT_METRICS names fields of Metrics
    return value


# -- plots ---------------------------------------------------------------------------------------
def _png(fig: Figure) -> str:
    return pages.png(fig)


def _bin_labels(edges: Sequence[int]) -> list[str]:
    """Bin labels: ``lo`` for a one-value bin, else ``lo–hi`` (left-closed: lo <= x < hi)."""
    labels = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        labels.append(_compact(lo) if hi - lo == 1 else f"{_compact(lo)}–{_compact(hi)}")
    return labels


def _hist_plot(
    series: Sequence[tuple[str, Histogram | None, str]], title: str, normalize: bool = False
) -> str | None:
    """Bars of fixed-edge histograms, drawn over each other (the first series widest)."""
    present = [(name, h, color) for name, h, color in series if h is not None and h.total]
    if not present:
        return None
    longest = max((h.edges for _, h, _ in present), key=len)
    n = len(longest) - 1
    padded = [(name, list(h.counts) + [0] * (n - len(h.counts)), color) for name, h, color in present]
    first = min(next(i for i, c in enumerate(counts) if c) for _, counts, _ in padded)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for k, (name, counts, color) in enumerate(padded):
        total = sum(counts)
        ys = [c / total for c in counts[first:]] if normalize else counts[first:]
        width = 0.8 if k == 0 else 0.45
        ax.bar(
            range(n - first),
            ys,
            width=width,
            color=color,
            label=f"{name} (n={total:,})",
            alpha=0.9 if k else 0.7,
        )
    ax.set_xticks(range(n - first))
    ax.set_xticklabels(_bin_labels(longest[first:]), rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("share" if normalize else "count")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _png(fig)


def _roles_plot(role_by_agent: Mapping[str, Mapping[str, int]]) -> str | None:
    if not role_by_agent:
        return None
    roles = sorted({r for c in role_by_agent.values() for r in c})
    agents = sorted(role_by_agent)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    bottom = [0] * len(roles)
    cmap = plt.get_cmap("tab10")
    for i, agent in enumerate(agents):
        ys = [role_by_agent[agent].get(r, 0) for r in roles]
        ax.bar(roles, ys, bottom=bottom, label=agent, color=cmap(i % 10))
        bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
    ax.set_ylabel("steps")
    ax.set_title("step roles by agent tag (curated)")
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8)
    return _png(fig)


def _tools_plot(inp: Mapping[str, ToolStats], kept: Mapping[str, ToolStats]) -> str | None:
    tools = sorted(set(inp) | set(kept))
    if not tools:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    xs = range(len(tools))

    def rates(d: Mapping[str, ToolStats]) -> list[float]:
        return [(s.error_rate or 0.0) if (s := d.get(t)) is not None else 0.0 for t in tools]

    ax.bar([x - 0.2 for x in xs], rates(inp), width=0.4, color=_INPUT, label="input runs")
    ax.bar([x + 0.2 for x in xs], rates(kept), width=0.4, color=_CURRENT, label="curated runs")
    for x, t in zip(xs, tools, strict=True):
        calls = s.calls if (s := inp.get(t)) is not None else 0
        ax.annotate(
            f"{calls:,} calls", (x, 0), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7
        )
    ax.set_xticks(list(xs))
    ax.set_xticklabels(tools, rotation=30, ha="right")
    ax.set_ylabel("error rate")
    ax.set_title("tool error rate per tool")
    ax.legend(fontsize=8)
    return _png(fig)


def _reasons_plot(reasons: Mapping[str, int]) -> str | None:
    if not reasons:
        return None
    items = sorted(reasons.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(8, max(2.0, 0.35 * len(items) + 1)))
    ax.barh([k for k, _ in items], [v for _, v in items], color=_PREVIOUS)
    ax.set_xlabel("quarantined runs")
    ax.set_title("filter reasons")
    return _png(fig)


# -- HTML ----------------------------------------------------------------------------------------
def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], row_class: Sequence[str] | None = None
) -> str:
    return pages.table(headers, rows, _fmt, row_class)


def _figure(png: str | None, caption: str, anchor: str) -> str:
    return pages.figure(png, caption, anchor)


def render_report(
    stats: CurationStats,
    previous: CurationStats | None = None,
    *,
    data_docs_href: str | None = None,
    title: str = "Trajectory data-quality report",
    drift_warn: float = 0.25,
) -> str:
    """The report as one HTML string (see the module docstring)."""
    m, gate = stats.metrics, stats.gate
    parts: list[str] = []
    parts.append(f"<p>Created {html.escape(stats.created_at)}.</p>")

    # headline
    status = "no gate" if gate is None else ("PASSED" if gate.success else "FAILED")
    cls = "" if gate is None else ("ok" if gate.success else "fail")
    parts.append(f'<h2>Headline</h2><p>Gate: <span class="{cls}">{status}</span></p>')
    parts.append(
        _table(
            ["metric", "value"],
            [
                ["runs in", stats.rows_in],
                ["runs kept", stats.rows_kept],
                ["runs quarantined", stats.rows_quarantined],
                ["kept rate", m.kept_rate],
                ["tasks kept", stats.kept_tasks],
                ["correct rate (scored input runs)", m.correct_rate_input],
                ["clean-end rate (input)", m.clean_end_rate_input],
                ["mean steps (curated)", m.mean_steps],
                ["mean tokens (curated)", m.mean_tokens],
                ["tool error rate (input)", m.tool_error_rate_input],
                ["contaminated rate", m.contaminated_rate],
                ["duplicate rate", m.duplicate_rate],
            ],
        )
    )

    # gate
    parts.append('<h2 id="gate">Data-quality gate</h2>')
    if data_docs_href:
        parts.append(
            f'<p>Great-expectations Data Docs: <a href="{html.escape(data_docs_href)}">index</a>.</p>'
        )
    checks = gate.checks if gate is not None else ()
    if checks:
        parts.append(
            _table(
                ["check", "suite", "expectation", "success", "observed", "unexpected", "of"],
                [  # the check first: a table split to fit the UI repeats its first column
                    [
                        c.check,
                        c.suite,
                        c.expectation,
                        c.success,
                        c.observed_value,
                        c.unexpected_count,
                        c.element_count,
                    ]
                    for c in checks
                ],
                ["" if c.success else "flag" for c in checks],
            )
        )
    else:
        parts.append("<p><em>The gate did not run.</em></p>")

    # reasons
    reasons, n_in = stats.reasons, stats.rows_in
    parts.append('<h2 id="reasons">Filter reasons</h2>')
    parts.append(
        _table(
            ["reason", "runs", "share of input"],
            [[k, v, v / n_in if n_in else None] for k, v in reasons.items()] or [["(none)", 0, None]],
        )
    )
    parts.append(_figure(_reasons_plot(reasons), "quarantined runs per filter reason", "plot-reasons"))

    hk, hi = stats.histograms, stats.histograms_input
    parts.append("<h2>Trajectories</h2>")
    parts.append(
        _figure(
            _hist_plot(
                [("input", hi.get("n_steps"), _INPUT), ("curated", hk.get("n_steps"), _CURRENT)],
                HIST_TITLES["n_steps"],
            ),
            "turns (steps) per trajectory",
            "plot-turns",
        )
    )
    parts.append(
        _figure(
            _hist_plot(
                [("input", hi.get("tokens"), _INPUT), ("curated", hk.get("tokens"), _CURRENT)],
                HIST_TITLES["tokens"],
            ),
            "tokens per trajectory",
            "plot-tokens",
        )
    )
    sk, si = stats.steps_kept, stats.steps_input
    parts.append("<h2>Steps</h2>")
    parts.append(_figure(_roles_plot(sk.role_by_agent), "step roles by agent tag", "plot-roles"))
    if sk.roles:
        parts.append(_table(["role", "curated steps"], list(sk.roles.items())))
    parts.append(_figure(_tools_plot(si.tools, sk.tools), "tool error rate per tool", "plot-tools"))
    if si.tools:
        parts.append(
            _table(
                ["tool", "calls (input)", "errors (input)", "error rate (input)", "error rate (curated)"],
                [
                    [t, v.calls, v.errors, v.error_rate, k.error_rate if (k := sk.tools.get(t)) else None]
                    for t, v in si.tools.items()
                ],
            )
        )
    parts.append(
        _figure(
            _hist_plot(
                [
                    ("input", hi.get("observation_chars"), _INPUT),
                    ("curated", hk.get("observation_chars"), _CURRENT),
                ],
                HIST_TITLES["observation_chars"],
            ),
            "observation lengths",
            "plot-observations",
        )
    )
    if stats.families:
        parts.append("<h2>Families and statuses</h2>")
        families = [[f, v.read, v.kept] for f, v in stats.families.items()]
        parts.append(_table(["family", "input", "kept"], families))
        parts.append(_table(["status (input)", "runs"], list(stats.statuses.items())))

    # drift
    parts.append('<h2 id="drift">Drift versus the previous run</h2>')
    if previous is None:
        parts.append("<p><em>No previous run to compare with.</em></p>")
    else:
        rows = drift_rows(stats, previous, drift_warn)
        parts.append(
            f"<p>Previous run created {html.escape(previous.created_at or '?')}; "
            f"rows marked changed by more than {drift_warn:.0%}.</p>"
        )
        parts.append(
            _table(
                ["metric", "previous", "current", "delta", "relative"],
                [[r.metric, r.previous, r.current, r.delta, r.relative] for r in rows],
                ["flag" if r.flag else "" for r in rows],
            )
        )
        prev_reasons = previous.reasons
        if prev_reasons or reasons:
            keys = sorted(set(prev_reasons) | set(reasons))
            parts.append(
                _table(
                    ["reason", "previous", "current"],
                    [[k, prev_reasons.get(k, 0), reasons.get(k, 0)] for k in keys],
                )
            )
        ph = previous.histograms
        for metric in ("n_steps", "tokens", "n_tool_calls", "observation_chars"):
            if ph.get(metric) and hk.get(metric):
                png = _hist_plot(
                    [("current", hk.get(metric), _CURRENT), ("previous", ph.get(metric), _PREVIOUS)],
                    f"{HIST_TITLES[metric]}: current vs previous (curated, share)",
                    normalize=True,
                )
                parts.append(_figure(png, f"drift of {HIST_TITLES[metric]}", f"plot-drift-{metric}"))
    return pages.page(title, parts)


def headline_markdown(stats: CurationStats, report_path: str | None = None) -> str:
    """The headline numbers as markdown, for the Prefect artifact."""
    m, gate = stats.metrics, stats.gate
    status = "not run" if gate is None else ("**passed**" if gate.success else "**FAILED**")
    lines = [
        "## Curate",
        "",
        "| metric | value |",
        "| --- | --- |",
        f"| runs in | {_fmt(stats.rows_in)} |",
        f"| runs kept | {_fmt(stats.rows_kept)} ({_fmt(m.kept_rate)}) |",
        f"| runs quarantined | {_fmt(stats.rows_quarantined)} |",
        f"| tasks kept | {_fmt(stats.kept_tasks)} |",
        f"| correct rate (scored input) | {_fmt(m.correct_rate_input)} |",
        f"| mean steps / tokens (curated) | {_fmt(m.mean_steps)} / {_fmt(m.mean_tokens)} |",
        f"| tool error rate (input) | {_fmt(m.tool_error_rate_input)} |",
        f"| gate | {status} |",
        "",
    ]
    reasons = stats.reasons
    if reasons:
        lines += [
            "**Quarantine reasons:** " + ", ".join(f"`{k}` {v:,}" for k, v in list(reasons.items())[:10]),
            "",
        ]
    failed = [c for c in gate.checks if not c.success] if gate is not None else []
    if failed:
        lines.append("**Failed expectations:**")
        for c in failed:
            lines.append(
                f"- `{c.suite}.{c.check}` ({c.expectation}): observed "
                f"{_fmt(c.observed_value)}, unexpected {_fmt(c.unexpected_count)}"
            )
        lines.append("")
    drift = [r for r in stats.drift if r.flag]
    if drift:
        lines.append(
            "**Drift:** " + ", ".join(f"{r.metric} {_fmt(r.previous)} → {_fmt(r.current)}" for r in drift)
        )
        lines.append("")
    if report_path:
        lines.append(f"Report: `{report_path}`")
    return "\n".join(lines)
