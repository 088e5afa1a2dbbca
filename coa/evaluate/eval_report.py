"""The evaluation report: benchmark accuracy with intervals, pass@k curves, accuracy against tokens.

:func:`render_eval_report` writes one self-contained HTML page (the shared reporting kit) from an
evaluation's metrics document (``metrics.json``), optionally beside the teacher's metrics on the
same benchmarks (:mod:`coa.evaluate.teacher_comparison`) and a paired comparison with a baseline evaluation
(:func:`coa.evaluate.compare.compare`: per-benchmark deltas of pass@1 with paired bootstrap
intervals, the promotion gate's primitive). :func:`headline` is the one-paragraph summary that goes
to the Prefect markdown artifact. Every report names each benchmark's scorer, says how each figure
is computed and on how many tasks of the task set, and whether the tools ran live or replayed a
recording (:func:`scoring_sections`).

Intervals: pass@1 ± 1.96 standard errors (the SE over tasks, :mod:`coa.evaluate.metrics`), a normal
approximation that is poor for very few tasks or rates near 0 or 1; the baseline deltas use the
bootstrap instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coa import pages
from coa.evaluate.metrics import ALL, cell

Z95 = 1.96
STUDENT, TEACHER, BASELINE = "#3b75af", "#e08a3c", "#999999"


def interval(m: Mapping[str, Any]) -> tuple[float, float] | None:
    """The 95% normal interval of pass@1, clipped to [0, 1]; None without a standard error."""
    se = m.get("pass@1_se")
    if se is None or m.get("pass@1") is None:
        return None
    p = float(m["pass@1"])
    return max(0.0, p - Z95 * se), min(1.0, p + Z95 * se)


def pass_curve(m: Mapping[str, Any]) -> list[tuple[int, float]]:
    """``(k, pass@k)`` points of one benchmark, k ascending."""
    points = [(int(k[5:]), float(v)) for k, v in m.items() if k.startswith("pass@") and k[5:].isdigit()]
    return sorted(points)


def benchmark_rows(benchmarks: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """The metrics table's rows, one per benchmark (``all`` last)."""
    rows = []
    for name, m in benchmarks.items():
        if not m.get("runs"):
            continue
        ci = interval(m)
        curve = pass_curve(m)
        maj = next((f"{v:.1%} ({k})" for k, v in m.items() if k.startswith("maj@") and v is not None), "n/a")
        rows.append(
            [
                name,
                str(m["tasks"]),
                str(m["samples"]),
                f"{m['pass@1']:.1%}",
                "n/a" if ci is None else f"[{ci[0]:.1%}, {ci[1]:.1%}]",
                ", ".join(f"@{k} {v:.0%}" for k, v in curve if k > 1) or "n/a",
                maj,
                cell(m.get("format_valid"), "{:.0%}"),
                cell(m.get("tokens_per_task"), "{:,.0f}"),
                cell(m.get("total_tokens_per_task"), "{:,.0f}"),
                cell(m.get("cost_of_pass"), "${:,.4f}"),
                cell(m.get("leak_rate"), "{:.0%}"),
            ]
        )
    return rows


BENCHMARK_HEADER = [
    "benchmark", "tasks", "K", "pass@1", "95% CI", "pass@k", "maj@K", "format-valid", "generated tok/task",
    "tokens/task (one pass)", "cost of pass", "gold in observation",
]  # fmt: skip


def accuracy_plot(student: Mapping[str, Any], teacher: Mapping[str, Any] | None) -> str | None:
    """Bars of pass@1 per benchmark with 95% intervals; the teacher beside the student."""
    names = [b for b in student if b != ALL and student[b].get("runs")]
    if not names:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(5.0, 1.4 * len(names) + 2), 3.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    series = [("student", STUDENT, student)] + ([("teacher", TEACHER, teacher)] if teacher else [])
    width = 0.8 / len(series)
    for j, (label, color, doc) in enumerate(series):
        xs: list[float] = []
        ys: list[float] = []
        errs: list[list[float]] = [[], []]
        for i, name in enumerate(names):
            m = doc.get(name)
            if not m or not m.get("runs"):
                continue
            ci = interval(m) or (m["pass@1"], m["pass@1"])
            xs.append(i + (j - (len(series) - 1) / 2) * width)
            ys.append(m["pass@1"])
            errs[0].append(m["pass@1"] - ci[0])
            errs[1].append(ci[1] - m["pass@1"])
        ax.bar(xs, ys, width, yerr=errs, capsize=4, label=label, color=color)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("pass@1 (95% CI)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return pages.png(fig, dpi=100)


def pass_at_k_plot(student: Mapping[str, Any]) -> str | None:
    """pass@k against k (log2 axis), one line per benchmark."""
    curves = {b: pass_curve(m) for b, m in student.items() if b != ALL and m.get("runs")}
    if not any(len(c) > 1 for c in curves.values()):
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5, 3.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for name, points in curves.items():
        ax.plot([k for k, _ in points], [v for _, v in points], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples)")
    ax.set_ylabel("pass@k (unbiased)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return pages.png(fig, dpi=100)


def tokens_plot(student: Mapping[str, Any], teacher: Mapping[str, Any] | None) -> str | None:
    """pass@1 against tokens per task (log axis), one point per benchmark, student and teacher."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = [("student", STUDENT, student)] + ([("teacher", TEACHER, teacher)] if teacher else [])
    points = {
        label: [
            (name, float(m["total_tokens_per_task"]), float(m["pass@1"]))
            for name, m in doc.items()
            if name != ALL and m.get("runs") and m.get("total_tokens_per_task")
        ]
        for label, _, doc in series
    }
    if not any(points.values()):
        return None
    fig = Figure(figsize=(5.5, 3.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for label, color, _ in series:
        pts = points[label]
        ax.scatter([x for _, x, _ in pts], [y for _, _, y in pts], color=color, label=label, s=40)
        for name, x, y in pts:
            ax.annotate(name, (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("tokens per task (one pass; teacher: all calls)")
    ax.set_ylabel("pass@1")
    ax.set_ylim(-0.02, 1.05)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return pages.png(fig, dpi=100)


def comparison_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Teacher vs student per benchmark: accuracy, tokens, reduction, cost-of-pass ratio."""
    header = ["benchmark", "student pass@1", "teacher pass@1", "student tok/task", "teacher tok/task",
              "token reduction", "cost-of-pass ratio (student / teacher)"]  # fmt: skip
    body = [
        [
            r["benchmark"],
            cell(r["student_pass@1"], "{:.1%}"),
            cell(r["teacher_pass@1"], "{:.1%}"),
            cell(r["student_tokens_per_task"], "{:,.0f}"),
            cell(r["teacher_tokens_per_task"], "{:,.0f}"),
            cell(r["token_reduction"], "{:.1%}"),
            cell(r["cost_of_pass_ratio"], "{:.3f}") + f" ({r['cost_of_pass_unit']})",
        ]
        for r in rows
    ]
    return pages.table(header, body)


def baseline_table(deltas: Mapping[str, Any]) -> str:
    """Per benchmark: candidate and baseline pass@1, the paired delta and its bootstrap interval."""
    header = ["benchmark", "pairs", "candidate", "baseline", "delta", "paired bootstrap CI", "verdict"]
    body = []
    for name, d in deltas.items():
        verdict = "better" if d["low"] > 0 else "worse" if d["high"] < 0 else "no significant change"
        body.append(
            [
                name,
                str(d["pairs"]),
                f"{d['candidate']:.1%}",
                f"{d['baseline']:.1%}",
                f"{d['delta']:+.1%}",
                f"[{d['low']:+.1%}, {d['high']:+.1%}] ({d['confidence']:.0%})",
                verdict,
            ]  # fmt: skip
        )
    return pages.table(header, body)


def headline(
    model: str,
    student: Mapping[str, Any],
    comparison: Sequence[Mapping[str, Any]] = (),
    deltas: Mapping[str, Any] | None = None,
    coverage: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """A markdown paragraph: pass@1 ± SE per benchmark (and of how many of its tasks, when
    ``coverage`` is given), the token reduction, the delta to baseline."""
    lines = [f"**Evaluation of `{model}`**", ""]
    for name, m in student.items():
        if not m.get("runs"):
            continue
        se = m.get("pass@1_se")
        spread = "" if se is None else f" ± {se:.1%}"
        tokens = m.get("total_tokens_per_task") or 0
        cover = (coverage or {}).get(name)
        of = f" of {cover['tasks_in_set']}" if cover and cover["tasks_in_set"] != m["tasks"] else ""
        lines.append(
            f"- {name}: pass@1 {m['pass@1']:.1%}{spread} ({m['tasks']}{of} tasks × {m['samples']} samples), "
            f"{tokens:,.0f} tokens/task"
        )
    overall = next((r for r in comparison if r["benchmark"] == ALL), None)
    if overall is not None and overall["token_reduction"] is not None:
        ratio = overall["cost_of_pass_ratio"]
        cop = "" if ratio is None else f", cost-of-pass ratio {ratio:.3f} ({overall['cost_of_pass_unit']})"
        lines.append(f"- vs the teacher: {overall['token_reduction']:.1%} fewer tokens per task{cop}")
    if deltas and ALL in deltas:
        d = deltas[ALL]
        lines.append(
            f"- vs the baseline: {d['delta']:+.1%} pass@1, paired bootstrap {d['confidence']:.0%} CI "
            f"[{d['low']:+.1%}, {d['high']:+.1%}] over {d['pairs']} pairs"
        )
    return "\n".join(lines)


def render_eval_report(
    *,
    title: str,
    student: Mapping[str, Any],
    teacher: Mapping[str, Any] | None = None,
    comparison: Sequence[Mapping[str, Any]] = (),
    deltas: Mapping[str, Any] | None = None,
    facts: Mapping[str, Any] | None = None,
    document: Mapping[str, Any] | None = None,
) -> str:
    """The HTML page. ``student`` / ``teacher``: ``benchmarks`` sections of metrics documents;
    ``comparison``: :func:`coa.evaluate.teacher_comparison.token_comparison`; ``deltas``: benchmark → a
    :class:`coa.evaluate.compare.Delta` as a dict; ``document``: the student's whole metrics
    document, for the scoring, coverage and tools sections (:func:`scoring_sections`)."""
    parts = [
        "<h2>Accuracy per benchmark</h2>",
        pages.table(BENCHMARK_HEADER, benchmark_rows(student)),
        pages.figure(accuracy_plot(student, teacher), "pass@1 per benchmark with 95% intervals"),
        pages.figure(pass_at_k_plot(student), "unbiased pass@k against the number of samples k"),
        "<h2>Accuracy against tokens</h2>",
        pages.figure(tokens_plot(student, teacher), "pass@1 against tokens per task, student vs teacher"),
    ]
    if comparison:
        parts += ["<h2>Student vs teacher</h2>", comparison_table(comparison)]
    if teacher:
        parts += [
            "<h3>Teacher per benchmark</h3>",
            pages.table(BENCHMARK_HEADER, benchmark_rows(teacher)),
        ]
    if deltas:
        parts += ["<h2>Against the baseline (paired)</h2>", baseline_table(deltas)]
    if document:
        parts += scoring_sections(document)
    if facts:
        parts += ["<h2>Run</h2>", pages.facts(list(facts.items()))]
    return pages.page(title, parts)


def scoring_sections(document: Mapping[str, Any]) -> list[str]:
    """How the numbers were made: the scorer of each benchmark, how each figure is computed and on
    how many tasks, and whether the tools ran live or from a recording (``metrics.json``'s parts)."""
    parts: list[str] = []
    scorers = document.get("scorers") or {}
    if scorers:
        body = []
        for bench, entry in scorers.items():
            for used in entry["scorers"]:
                named = used["name"] is not None
                body.append(
                    [
                        bench,
                        f"{used['name']} v{used['version']}"
                        + (f" ({used['package']})" if used.get("package") else "")
                        if named
                        else "not recorded (an older eval table)",
                        "yes" if used["published_rule"] else "no (project rule)",
                        used.get("rule") or "",
                        entry.get("note", ""),
                    ]
                )
        parts += [
            "<h2>Scoring</h2>",
            pages.table(["benchmark", "scorer", "benchmark's published rule", "rule", "note"], body),
        ]
    coverage = document.get("coverage") or {}
    benchmarks = document.get("benchmarks") or {}
    if coverage:
        body = [
            [
                name,
                str(c["tasks_in_set"]),
                str(c["tasks_scored"]),
                str(c["runs"]),
                str(benchmarks.get(name, {}).get("samples", "n/a")),
                "all" if c["tasks_scored"] == c["tasks_in_set"] else "SUBSET",
            ]
            for name, c in coverage.items()
        ]
        parts += [
            "<h3>Tasks scored</h3>",
            pages.table(["benchmark", "tasks in set", "tasks scored", "runs", "K", "coverage"], body),
        ]
    computation = document.get("computation") or {}
    if computation:
        parts += ["<h3>How each figure is computed</h3>", pages.facts(list(computation.items()))]
    tools = document.get("tools")
    if tools:
        parts += [
            f"<h3>Tools: {pages.escape(tools['mode'])}</h3>",
            pages.facts([(k, "null" if v is None else v) for k, v in tools.items()]),
        ]
    return parts
