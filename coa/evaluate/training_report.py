"""The training report: what SFT did to the student, beside what the teacher costs.

:func:`teacher_metrics` scores the multi-agent teacher's own runs on the evaluation tasks (from
``trajectory.v1``); :func:`comparison_rows` lines them up with the student's metrics before and
after SFT, per family; :func:`render_report` writes one self-contained HTML page (plots embedded)
with the loss curve, a before/after chart and the table; :func:`format_comparison` prints the same
table on a terminal.

**Token cost.** The teacher's cost is every token its agents send and receive over all their LLM
calls (a multi-agent system re-sends context at every call): the endpoint's ``usage``, or for the
offline teacher the Qwen2.5 vocabulary (:func:`coa.agents.tokens.qwen_token_count`). The student's
is one pass over its single trajectory: prompt, generated tokens and the observations it reads, as
its own tokenizer counted them in the evaluation (``eval.v1`` ``total_tokens``). No bytes/token
estimate is involved.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from coa import pages
from coa.evaluate.changes import CHANGES_LEGEND, changes_cells, changes_plot, step_changes
from coa.evaluate.metrics import aligned_table, cell
from coa.evaluate.summary import StepChange
from coa.pages import percent_by_family

ROUND_EVAL = "after_r"
"""Prefix of the training report's input of round r's held-out evaluation (``after_r2``…)."""
ROUND_MODEL = "sft_r"
"""Prefix of the training report's input of round r's SFT model (``sft_r2``…)."""


def throughput(result: Mapping[str, Any]) -> str:
    """``10,497 tokens/s, 382 steps/min on <device>`` of an ``sft_result.json`` (the device's name where
    the run recorded one: CPU model and threads, or the GPU)."""
    runtime, steps = result.get("train_runtime_s") or 0.0, result.get("steps_run") or 0
    pace = f", {steps / runtime * 60:,.0f} steps/min" if runtime > 0 and steps else ""
    return f"{result['tokens_per_s']:,.0f} tokens/s{pace} on {result.get('device_name') or result['device']}"


def round_inputs(inputs: Mapping[str, Any]) -> dict[int, tuple[Any, Any]]:
    """Round → (its evaluation, its SFT model) among a training report's inputs (``after_r2``…)."""
    out = {}
    for role, value in inputs.items():
        number = role.removeprefix(ROUND_EVAL)
        if role.startswith(ROUND_EVAL) and number.isdigit():
            out[int(number)] = (value, inputs[f"{ROUND_MODEL}{number}"])
    return out


ALL = "all"
METRIC_LABELS = {
    "format_valid": "format-valid",
    "accuracy": "accuracy",
    "tokens_per_task": "tokens/task",
    "tool_calls_per_task": "tool calls/task",
}


def teacher_metrics(runs: pa.Table) -> dict[str, dict[str, float]]:
    """Per family (and ``all``): tasks, accuracy, tokens per task, tool calls per task of teacher runs."""
    rows = runs.select(
        ["family", "correct", "prompt_tokens", "completion_tokens", "n_tool_calls"]
    ).to_pylist()
    groups: dict[str, list[dict[str, Any]]] = {ALL: rows}
    for row in rows:
        groups.setdefault(row["family"], []).append(row)
    out = {}
    for family, group in groups.items():
        n = len(group)
        out[family] = {
            "n": n,
            "accuracy": sum(bool(r["correct"]) for r in group) / n if n else 0.0,
            "tokens_per_task": sum(r["prompt_tokens"] + r["completion_tokens"] for r in group) / n
            if n
            else 0.0,
            "tool_calls_per_task": sum(r["n_tool_calls"] for r in group) / n if n else 0.0,
        }
    return out


def student_token_cost(eval_rows: pa.Table) -> dict[str, float]:
    """Per family (and ``all``): mean tokens of the student's one pass per run (``total_tokens``:
    prompt, generated tokens and observations, in the student's own tokenizer)."""
    groups: dict[str, list[int]] = {ALL: []}
    for row in eval_rows.select(["family", "total_tokens"]).to_pylist():
        groups[ALL].append(row["total_tokens"])
        groups.setdefault(row["family"], []).append(row["total_tokens"])
    return {family: sum(v) / len(v) for family, v in groups.items() if v}


def comparison_rows(
    before: Mapping[str, Mapping[str, float]],
    after: Mapping[str, Mapping[str, float]],
    teacher: Mapping[str, Mapping[str, float]] | None = None,
    after_rl: Mapping[str, Mapping[str, float]] | None = None,
    rounds: Mapping[int, Mapping[str, Mapping[str, float]]] | None = None,
) -> list[dict[str, Any]]:
    """One row per family: n, format-valid and accuracy before → after, tokens/task, teacher's figures.

    ``before`` / ``after`` map family → {n, format_valid, accuracy, tokens_per_task,
    tool_calls_per_task}; ``teacher`` the same from :func:`teacher_metrics`; ``after_rl`` (the
    student after the RL phase that followed SFT) adds the ``*_after_rl`` columns; ``rounds`` (round
    r ≥ 2 → the metrics of the SFT model of self-improvement round r) adds ``*_after_r<r>`` columns.
    """
    families = [f for f in after if f != ALL] + [ALL]
    rows = []
    for family in families:
        b, a = before.get(family, {}), after.get(family, {})
        t = (teacher or {}).get(family, {})
        rows.append(
            {
                "family": family,
                "n": int(a.get("n", 0)),
                "format_valid_before": b.get("format_valid"),
                "format_valid_after": a.get("format_valid"),
                "accuracy_before": b.get("accuracy"),
                "accuracy_after": a.get("accuracy"),
                "accuracy_after_se": a.get("pass@1_se"),
                "tokens_per_task_before": b.get("tokens_per_task"),
                "tokens_per_task_after": a.get("tokens_per_task"),
                "teacher_accuracy": t.get("accuracy"),
                "teacher_tokens_per_task": t.get("tokens_per_task"),
            }
        )
        for n, metrics in sorted((rounds or {}).items()):
            m = metrics.get(family, {})
            rows[-1] |= {
                f"format_valid_after_r{n}": m.get("format_valid"),
                f"accuracy_after_r{n}": m.get("accuracy"),
                f"tokens_per_task_after_r{n}": m.get("tokens_per_task"),
            }
        if after_rl is not None:
            r = after_rl.get(family, {})
            rows[-1] |= {
                "format_valid_after_rl": r.get("format_valid"),
                "accuracy_after_rl": r.get("accuracy"),
                "tokens_per_task_after_rl": r.get("tokens_per_task"),
            }
    return rows


COLUMNS = (
    ("family", "family", "{}"),
    ("n", "tasks", "{}"),
    ("format_valid_before", "valid before", "{:.0%}"),
    ("format_valid_after", "valid after", "{:.0%}"),
    ("accuracy_before", "acc. before", "{:.0%}"),
    ("accuracy_after", "acc. after", "{:.0%}"),
    ("accuracy_after_se", "± se", "{:.1%}"),
    ("tokens_per_task_after", "student tok/task", "{:,.0f}"),
    ("teacher_accuracy", "teacher acc.", "{:.0%}"),
    ("teacher_tokens_per_task", "teacher tok/task", "{:,.0f}"),
)
RL_COLUMNS = (
    ("format_valid_after_rl", "valid after RL", "{:.0%}"),
    ("accuracy_after_rl", "acc. after RL", "{:.0%}"),
    ("tokens_per_task_after_rl", "tok/task after RL", "{:,.0f}"),
)
"""Columns of the student after the RL phase, shown when the rows carry them."""


ROUND_KEY = re.compile(r"accuracy_after_r(\d+)")
"""A row's key of round r's accuracy (``accuracy_after_r2``…)."""


def round_numbers(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """The self-improvement rounds (2..) the rows carry figures of."""
    found = {int(m.group(1)) for r in rows for k in r if (m := ROUND_KEY.fullmatch(k))}
    return sorted(found)


def round_columns(n: int) -> tuple[tuple[str, str, str], ...]:
    """Columns of the SFT model of round ``n``."""
    return (
        (f"format_valid_after_r{n}", f"valid round {n}", "{:.0%}"),
        (f"accuracy_after_r{n}", f"acc. round {n}", "{:.0%}"),
    )


def columns(rows: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str, str], ...]:
    """The table's columns: each later round's, then the RL ones, after ``acc. after`` (round 1)
    when the rows carry them."""
    extra: tuple[tuple[str, str, str], ...] = tuple(c for n in round_numbers(rows) for c in round_columns(n))
    if any("accuracy_after_rl" in r for r in rows):
        extra += RL_COLUMNS
    if not extra:
        return COLUMNS
    at = [key for key, _, _ in COLUMNS].index("accuracy_after") + 1
    return COLUMNS[:at] + extra + COLUMNS[at:]


def format_comparison(rows: Sequence[Mapping[str, Any]]) -> str:
    """The comparison as an aligned plain-text table."""
    shown = columns(rows)
    header = [label for _, label, _ in shown]
    return aligned_table([header, *([cell(row.get(key), fmt) for key, _, fmt in shown] for row in rows)])


ROUND_COLORS = ("#7b4fa6", "#c2549d", "#17becf", "#8c564b")


def comparison_plot(rows: Sequence[Mapping[str, Any]]) -> str:
    """Bars per family: format-valid rate, accuracy, tokens per task; before/after SFT and the teacher."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12.0, 3.8), dpi=100)
    FigureCanvasAgg(fig)
    series: list[tuple[str, str, str | None, str, str]] = [
        ("student before SFT", "#bbbbbb", "format_valid_before", "accuracy_before", "tokens_per_task_before"),
        ("student after SFT", "#3b75af", "format_valid_after", "accuracy_after", "tokens_per_task_after"),
        ("teacher (multi-agent)", "#e08a3c", None, "teacher_accuracy", "teacher_tokens_per_task"),
    ]
    for k, n in enumerate(round_numbers(rows)):
        series.insert(
            2 + k,
            (
                f"student after round {n}",
                ROUND_COLORS[k % len(ROUND_COLORS)],
                f"format_valid_after_r{n}",
                f"accuracy_after_r{n}",
                f"tokens_per_task_after_r{n}",
            ),
        )
    if any("accuracy_after_rl" in r for r in rows):
        series.insert(
            len(series) - 1,
            (
                "student after RL",
                "#2ca02c",
                "format_valid_after_rl",
                "accuracy_after_rl",
                "tokens_per_task_after_rl",
            ),
        )
    panels = (("CoA format-valid rate", 2), ("Accuracy (pass@1)", 3), ("Tokens per task (log)", 4))
    width = 0.8 / len(series)
    for k, (title, field) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        for j, entry in enumerate(series):
            key = entry[field]
            if key is None:
                continue
            values = [float(r.get(key) or 0.0) for r in rows]
            ax.bar(
                [i + (j - (len(series) - 1) / 2) * width for i in range(len(rows))],
                values,
                width,
                label=entry[0],
                color=entry[1],
            )
        ax.set_xticks(range(len(rows)), [r["family"] for r in rows])
        if field == 4:
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, 1.05)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = fig.axes[-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(series), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return pages.png(fig, dpi=100)


def render_report(
    *,
    title: str,
    rows: Sequence[Mapping[str, Any]],
    loss_png: bytes | None,
    facts: Mapping[str, Any],
    notes: Sequence[str] = (),
    rl_png: bytes | None = None,
    rl_facts: Mapping[str, Any] | None = None,
    changes: Sequence[StepChange] = (),
) -> str:
    """A self-contained HTML page: headline facts, the table, the before/after chart, each step's
    paired change, the loss curve (and, after an RL phase, its reward / entropy curves and facts)."""
    shown = columns(rows)
    header = [label for _, label, _ in shown]
    body = [[cell(r.get(key), fmt) for key, _, fmt in shown] for r in rows]
    changed: list[str] = []
    if changes:
        cells = changes_cells(changes)
        changed = [
            "<h2>What each step changed</h2>",
            f"<p>{pages.escape(CHANGES_LEGEND)}. A change whose interval holds 0 is within what the "
            "draw of these tasks moves by itself; with several families and steps, about one interval "
            "in twenty excludes 0 by chance alone.</p>",
            pages.table(cells[0], cells[1:]),
            pages.figure(changes_plot(changes), "each step's change in accuracy, with its 95% interval"),
        ]
    loss = (
        pages.figure(pages.png_bytes(loss_png), "SFT loss curve")
        if loss_png
        else "<p>No loss curve (no SFT run).</p>"
    )
    return pages.page(
        title,
        [
            "<h2>Student before and after SFT, on held-out tasks</h2>",
            pages.table(header, body),
            pages.figure(comparison_plot(rows), "format-valid rate, accuracy and tokens per task"),
            *changed,
            "<h2>SFT</h2>",
            loss,
            pages.facts(list(facts.items())),
            *(
                [
                    "<h2>RL (GRPO/DAPO on tool rollouts)</h2>",
                    pages.figure(pages.png_bytes(rl_png), "reward per term, entropy, zero-variance groups"),
                    pages.facts(list((rl_facts or {}).items())),
                ]
                if rl_png
                else []
            ),
            "<h2>Notes</h2><ul>" + "".join(f"<li>{pages.escape(n)}</li>" for n in notes) + "</ul>",
        ],
    )


def write_training_report(b: Any) -> tuple[list[dict[str, Any]], list[StepChange]]:
    """Stage ``report.html``, ``comparison.json`` and ``changes.json`` of the report step ``b``; return
    the rows and each training step's paired change (:func:`step_changes`).

    Inputs: ``tasks`` (the held-out table), ``before`` / ``after`` (eval artifacts of the student
    before and after SFT), ``sft`` (the fine-tuned model artifact), ``teacher`` (the teacher's
    ``trajectory.v1`` runs on the same tasks, scored here as curation scores them).
    """
    import json

    from coa import io
    from coa.evaluate.stage import EVAL_TABLE, read_metrics
    from coa.scoring.runs import score_runs

    tasks = b.table("tasks")
    before_ref = b.table("before").ref
    after = b.optional("after")
    after_ref = after.ref if after is not None else None
    sft = b.optional("sft")
    teacher_input = b.optional("teacher")
    after_rl, rl = b.optional("after_rl"), b.optional("rl")
    task_table = tasks.read()
    teacher = None
    if teacher_input is not None:
        teacher = teacher_metrics(score_runs(teacher_input.read(), task_table))
    final_ref = after_ref or before_ref

    def cost(ref: Any) -> dict[str, float]:
        return student_token_cost(io.read_table(ref, EVAL_TABLE))

    def with_cost(ref: Any) -> dict[str, dict[str, Any]]:
        tokens = cost(ref)
        return {f: {**m, "tokens_per_task": tokens.get(f)} for f, m in read_metrics(ref).items()}

    rounds = round_inputs(b.inputs)
    round_evals = {n: evaluation.ref for n, (evaluation, _) in rounds.items()}
    in_order = [("before SFT", before_ref), ("SFT", after_ref)]
    in_order += [(f"round {n}", round_evals[n]) for n in sorted(round_evals)]
    in_order += [("RL", after_rl.ref if after_rl is not None else None)]
    changes = step_changes([(name, io.read_table(ref, EVAL_TABLE)) for name, ref in in_order if ref])
    rows = comparison_rows(
        with_cost(before_ref),
        with_cost(after_ref) if after_ref else {},
        teacher,
        with_cost(after_rl.ref) if after_rl is not None else None,
        {n: with_cost(ref) for n, ref in round_evals.items()} or None,
    )
    facts: dict[str, Any] = {
        "held-out tasks": f"{tasks.uri} [{tasks.table}]",
        "evaluation (after)": final_ref.uri,
    }
    loss_png = None
    if sft is not None:
        result = json.loads(io.read_file(sft.ref, "sft_result.json"))
        loss_png = io.read_file(sft.ref, "loss_curve.png")
        facts |= {
            "fine-tuned model": sft.ref.uri,
            "optimizer steps (planned / run)": f"{result['steps_planned']} / {result['global_step']}",
            "training tokens seen": f"{result['tokens_seen']:,}",
            "final training loss": f"{result['final_loss']:.4f}",
            "final held-out loss": (
                f"{result['heldout_loss_curve'][-1][1]:.4f} on {result['n_heldout']} held-out examples"
                if result.get("heldout_loss_curve")
                else "not measured"
            ),
            "overfitting": result.get("overfit_warning") or "none seen (held-out loss did not rise)",
            "training throughput": throughput(result),
            "examples / truncated / dropped": f"{result['n_examples']} / {result['n_truncated']} / "
            f"{result['n_dropped']}",
        }
    for n in sorted(round_evals):
        model = rounds[n][1]
        result = json.loads(io.read_file(model.ref, "sft_result.json"))
        loss = result.get("final_loss")
        facts[f"round {n}"] = (
            f"{model.ref.uri}: the round-{n - 1} model fine-tuned on the teacher's runs and its own correct "
            f"samples; {result['global_step']} steps, final training loss "
            + (f"{loss:.4f}" if loss is not None else "not logged")
        )
    notes = [
        "Held-out tasks never appear in training (the synthetic generator keeps the splits apart).",
        "Token cost: teacher = every token its agents send and receive over all LLM calls (endpoint usage, "
        "or the Qwen2.5 vocabulary for the offline teacher); student = one pass over prompt, trajectory "
        "and observations in its own tokenizer. Real tokenizers, no bytes/token estimate.",
        "Accuracy is pass@1 (± its standard error over tasks) with greedy decoding; math answers are "
        "checked with math-verify, programs "
        "by the task's tests in the sandbox, multi-hop answers by exact match.",
    ]
    rl_png, rl_facts = None, None
    if rl is not None:
        rl_result = json.loads(io.read_file(rl.ref, "rl_result.json"))
        rl_png = io.read_file(rl.ref, "rl_curves.png")
        last = rl_result["curves"][-1] if rl_result["curves"] else {}
        rl_facts = {
            "RL model": rl.ref.uri,
            "optimizer steps (planned / run)": f"{rl_result['steps_planned']} / {rl_result['global_step']}",
            "rollouts": f"{rl_result['rollouts']:,} in {rl_result['train_runtime_s']:.0f} s on "
            f"{rl_result.get('device_name') or rl_result['device']}",
            "last reward / entropy": f"{last.get('reward', math.nan):.3f} / "
            f"{last.get('entropy', math.nan):.3f}",
        }
        rl_lineage = io.read_lineage(rl.ref)
        if rl_lineage.get("families"):
            choice = rl_lineage.get("family_choice")
            rl_facts["families"] = ", ".join(rl_lineage["families"]) + (
                f" (auto: {choice['rule']}; after SFT {percent_by_family(choice['accuracy'])}"
                + "".join(
                    f"; {f} left out: {why}" for f, why in sorted((choice.get("excluded") or {}).items())
                )
                + ")"
                if choice
                else ""
            )
        signal = rl_lineage.get("learning_signal")
        if signal:  # RL artifacts made before it was recorded have none
            rl_facts["learning signal"] = signal["warning"] or (
                f"{signal['correct_share']:.1%} of episodes correct; {signal['mixed_groups']:,} of "
                f"{signal['groups']:,} groups mixed right and wrong episodes"
            )
    run_name = b.step.config.run_name
    page = render_report(
        title=f"CoA training report: {run_name}",
        rows=rows,
        loss_png=loss_png,
        facts=facts,
        notes=notes,
        rl_png=rl_png,
        rl_facts=rl_facts,
        changes=changes,
    )
    b.writer.write_file("report.html", page)
    b.writer.write_file("comparison.json", json.dumps(rows, indent=2))
    b.writer.write_file("changes.json", json.dumps([c.model_dump(mode="json") for c in changes], indent=2))
    return rows, changes
