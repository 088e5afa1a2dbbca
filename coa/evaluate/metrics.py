"""Metrics of an ``eval.v1`` table: per benchmark, per family and over all tasks.

Every group is summarised by :func:`summarize` (rows are (task, sample) runs; a task is a
``task_id``):

* ``pass@1``: the mean correctness over all samples (avg@K); ``pass@1_se`` its standard error,
  the standard deviation of the per-task means over the tasks (ddof 1) divided by sqrt(tasks):
  tasks are the sampling unit, samples of one task are not independent draws of the benchmark;
* ``pass@k`` for each power of two ``k <= K`` and for ``k = K`` (K = the fewest samples any task of
  the group has; pass@K is "any of the K samples correct", AFM's Pass@3 with 3 rounds): the
  unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)`` per task, averaged;
* ``maj@K``: a task is solved when its most frequent answer is a correct one (math answers grouped
  by math-verify equivalence, QA answers by their normalised text; ties go to the class seen first;
  runs without an answer do not vote); ``None`` for code, whose programs are not compared;
* ``format_valid``, ``tokens_per_task`` (mean generated tokens of a run), ``total_tokens_per_task``
  (mean tokens of the run's one pass: prompt, generated and observations), ``tool_calls_per_task``,
  ``tokens_per_solved`` (all generated tokens over all correct runs), ``leak_rate`` (runs whose
  observations held the gold answer);
* ``cost_per_task`` and ``cost_of_pass`` (expected dollars per solved task: mean cost of a run over
  pass@1, Erol et al. 2025) when the model's token prices are given.

``accuracy`` is kept as an alias of ``pass@1`` and ``n`` of ``tasks`` (what the training report reads).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from coa.evaluate.config import TokenPrice
from coa.pages import percent_by_family as percent_by_family  # its home is coa.pages (rl uses it)

ALL = "all"
COLUMNS = (
    "task_id", "benchmark", "family", "model", "sample_index", "prediction", "correct", "format_valid",
    "prompt_tokens", "completion_tokens", "n_tool_calls",
)  # fmt: skip
COMPARABLE = ("math", "mhqa", "web")
"""Families whose answers can be compared with each other (for maj@K)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``n`` samples of which ``c`` are correct (Chen et al. 2021).

    ``1 - C(n-c, k) / C(n, k)``, computed as a product so that large ``n`` does not overflow.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def powers_of_two(k_max: int) -> list[int]:
    """1, 2, 4, ... up to ``k_max``."""
    out, k = [], 1
    while k <= k_max:
        out.append(k)
        k *= 2
    return out


def answer_key(prediction: str, family: str) -> str:
    """The text a prediction votes with: its math expression or its normalised QA answer."""
    from coa.scoring import normalize_answer
    from coa.scoring.math import answer_expression

    if family == "math":
        return "".join(answer_expression(prediction)[0].split())
    return normalize_answer(prediction)


def majority_correct(
    predictions: Sequence[str | None],
    correct: Sequence[bool],
    family: str,
    same: Callable[[str, str], bool] | None = None,
) -> bool:
    """Whether the most frequent answer among ``predictions`` is a correct one.

    Answers are grouped by :func:`answer_key`; for math, groups whose expressions ``same`` calls
    equal (default: math-verify) are merged. A group's verdict is that of its first member.
    """
    groups: list[list[int]] = []  # indices, in order of first appearance
    keys: list[str] = []
    for i, prediction in enumerate(predictions):
        if prediction is None or not prediction.strip():
            continue
        key = answer_key(prediction, family)
        if key in keys:
            groups[keys.index(key)].append(i)
        else:
            keys.append(key)
            groups.append([i])
    if family == "math" and len(groups) > 1:
        groups = _merge_equivalent(groups, keys, same or _math_same)
    if not groups:
        return False
    best = max(groups, key=len)  # max keeps the first of equal sizes
    return bool(correct[best[0]])


def _math_same(a: str, b: str) -> bool:
    from coa.scoring.math import math_equal

    return bool(math_equal(a, b))


def _merge_equivalent(
    groups: list[list[int]], keys: list[str], same: Callable[[str, str], bool]
) -> list[list[int]]:
    merged: list[tuple[str, list[int]]] = []
    for key, members in zip(keys, groups, strict=True):
        for rep, into in merged:
            if same(rep, key):
                into.extend(members)
                break
        else:
            merged.append((key, list(members)))
    return [sorted(members) for _, members in merged]


def summarize(
    rows: Sequence[Mapping[str, Any]], prices: Mapping[str, TokenPrice] | None = None
) -> dict[str, Any]:
    """The metrics of one group of runs (see the module docstring)."""
    tasks: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        tasks.setdefault(row["task_id"], []).append(row)
    n = len(rows)
    if n == 0:
        return {"n": 0, "tasks": 0, "runs": 0, "samples": 0}
    k_max = min(len(runs) for runs in tasks.values())
    per_task = [sum(bool(r["correct"]) for r in runs) / len(runs) for runs in tasks.values()]
    solved = sum(bool(r["correct"]) for r in rows)
    tokens = sum(int(r["completion_tokens"]) for r in rows)
    pass1 = solved / n
    out: dict[str, Any] = {
        "n": len(tasks),
        "tasks": len(tasks),
        "runs": n,
        "samples": k_max,
        "pass@1": pass1,
        "pass@1_se": _standard_error(per_task),
    }
    for k in sorted(set(powers_of_two(k_max)[1:]) | ({k_max} if k_max > 1 else set())):
        out[f"pass@{k}"] = sum(
            pass_at_k(len(runs), sum(bool(r["correct"]) for r in runs), k) for runs in tasks.values()
        ) / len(tasks)
    families = {r["family"] for r in rows}
    if families <= set(COMPARABLE):
        out[f"maj@{k_max}"] = sum(
            majority_correct(
                [r["prediction"] for r in runs[:k_max]], [bool(r["correct"]) for r in runs[:k_max]],
                runs[0]["family"],
            )
            for runs in tasks.values()
        ) / len(tasks)  # fmt: skip
    out |= {
        "accuracy": pass1,
        "format_valid": sum(bool(r["format_valid"]) for r in rows) / n,
        "tokens_per_task": tokens / n,
        "tool_calls_per_task": sum(int(r["n_tool_calls"]) for r in rows) / n,
        "tokens_per_solved": tokens / solved if solved else None,
        "total_tokens_per_task": (
            sum(int(r["total_tokens"]) for r in rows) / n if all("total_tokens" in r for r in rows) else None
        ),
        "leak_rate": sum(bool(r.get("gold_in_observation")) for r in rows) / n,
    }
    if prices:
        costs = [_cost(r, prices) for r in rows]
        if all(c is not None for c in costs):
            per_run = sum(c for c in costs if c is not None) / n
            out["cost_per_task"] = per_run
            out["cost_of_pass"] = per_run / pass1 if pass1 else None
    return out


def _standard_error(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var / len(values))


def _cost(row: Mapping[str, Any], prices: Mapping[str, TokenPrice]) -> float | None:
    price = prices.get(row["model"])
    if price is None:
        return None
    return price.dollars(int(row["prompt_tokens"]), int(row["completion_tokens"]))


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    columns = [c for c in (*COLUMNS, "total_tokens", "gold_in_observation") if c in table.column_names]
    return list(table.select(columns).to_pylist())


def eval_metrics(
    table: pa.Table, prices: Mapping[str, TokenPrice] | None = None
) -> dict[str, dict[str, Any]]:
    """Per family and ``all``: :func:`summarize` of their runs (family → metrics)."""
    return _grouped(_rows(table), "family", prices)


def benchmark_metrics(
    table: pa.Table, prices: Mapping[str, TokenPrice] | None = None
) -> dict[str, dict[str, Any]]:
    """Per benchmark (``eval.v1`` ``benchmark``) and ``all``: :func:`summarize` of their runs."""
    return _grouped(_rows(table), "benchmark", prices)


def _grouped(
    rows: list[dict[str, Any]], column: str, prices: Mapping[str, TokenPrice] | None
) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row[column], []).append(row)
    out = {name: summarize(group, prices) for name, group in sorted(groups.items())}
    out[ALL] = summarize(rows, prices)
    return out


COMPUTATION = {
    "pass@1": "avg@K: the mean correctness over all K samples of every task of the group (K = samples per "
    "task; greedy when K = 1), with its standard error over tasks (pass@1_se)",
    "pass@k": "unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k) per task with n samples of which "
    "c are correct, averaged over the tasks; k = 2, 4, 8, ... up to K, and K itself (pass@K: any of the "
    "K samples correct, e.g. AFM's Pass@3 over 3 rounds)",
    "maj@K": "a task counts when its most frequent answer among its K samples is correct (math answers "
    "grouped by math-verify equivalence, others by normalised text; runs without an answer do not vote)",
    "tasks": "every selected task counts, a run without an answer as wrong; `coverage` gives the tasks of "
    "each benchmark's task set against those scored",
    "correct": "each benchmark's own scorer (`scorers`): its name and version are in every eval.v1 row",
}
"""How each figure of ``metrics.json`` is computed (copied into the document and the report)."""


def scorers_used(table: pa.Table) -> dict[str, dict[str, Any]]:
    """Per benchmark: the scorer(s) of its rows (name, version, rule, whether it is the benchmark's
    published rule, the publisher's grader package and version it runs) and a note when the
    benchmark's own rule is not the one used."""
    from coa.scoring.benchmarks import SCORERS, benchmark_of

    if "scorer" not in table.column_names:
        return {}
    columns = ["benchmark", "family", "scorer", "scorer_version"]
    seen: dict[str, dict[tuple[str | None, str | None], None]] = {}
    families: dict[str, str] = {}
    for row in table.select(columns).to_pylist():
        seen.setdefault(row["benchmark"], {})[(row["scorer"], row["scorer_version"])] = None
        families[row["benchmark"]] = row["family"]
    out: dict[str, dict[str, Any]] = {}
    for bench, pairs in sorted(seen.items()):
        used = []
        for name, version in pairs:
            known = SCORERS.get(name or "")
            used.append(
                {
                    "name": name,
                    "version": version,
                    "rule": known.info.rule if known else None,
                    "published_rule": bool(known and known.info.published),
                    "package": known.info.package if known else None,
                }
            )
        entry: dict[str, Any] = {"scorers": used}
        found = benchmark_of(bench)
        if found is not None and found[1] not in {u["name"] for u in used}:
            own = SCORERS[found[1]]
            if families[bench] in own.families:
                names = ", ".join(str(u["name"]) for u in used)
                entry["note"] = (
                    f"{found[0]}'s published rule is {found[1]}; these rows were scored by {names}, "
                    "so the number is not comparable with its leaderboard"
                )
        out[bench] = entry
    return out


def metrics_document(
    table: pa.Table,
    prices: Mapping[str, TokenPrice] | None = None,
    *,
    coverage: Mapping[str, Mapping[str, Any]] | None = None,
    tools: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What ``metrics.json`` holds: ``{"families": …, "benchmarks": …}`` (each ending with ``all``),
    the scorer of each benchmark (``scorers``), how each figure is computed (``computation``), and,
    when given, the tasks scored of each task set (``coverage``) and the tools' mode (``tools``:
    live or replayed, from which recording, :mod:`coa.evaluate.replay`)."""
    document: dict[str, Any] = {
        "families": eval_metrics(table, prices),
        "benchmarks": benchmark_metrics(table, prices),
        "scorers": scorers_used(table),
        "computation": dict(COMPUTATION),
    }
    if coverage is not None:
        document["coverage"] = {k: dict(v) for k, v in sorted(coverage.items())}
    if tools is not None:
        document["tools"] = dict(tools)
    return document


def coverage_of(task_counts: Mapping[str, int], table: pa.Table) -> dict[str, dict[str, Any]]:
    """Per benchmark: tasks in its task set, tasks scored, and runs (never a silent subset)."""
    scored: dict[str, set[str]] = {}
    runs: dict[str, int] = {}
    for row in table.select(["benchmark", "task_id"]).to_pylist():
        scored.setdefault(row["benchmark"], set()).add(row["task_id"])
        runs[row["benchmark"]] = runs.get(row["benchmark"], 0) + 1
    names = sorted(set(task_counts) | set(scored))
    return {
        name: {
            "tasks_in_set": int(task_counts.get(name, len(scored.get(name, ())))),
            "tasks_scored": len(scored.get(name, ())),
            "runs": runs.get(name, 0),
        }
        for name in names
    }


def metrics_rows(metrics: Mapping[str, Mapping[str, Any]], label: str = "family") -> list[dict[str, str]]:
    """The metrics as table rows of display cells (rates in percent), one per family or benchmark:
    what the terminal, the Prefect artifact and :func:`format_metrics_table` show."""
    ks = sorted(
        {int(k[5:]) for m in metrics.values() for k in m if k.startswith("pass@") and k[5:].isdigit()}
    )
    majs = sorted({k for m in metrics.values() for k in m if k.startswith("maj@")})
    header = [label, "tasks", "K", "pass@1 ± se", *[f"pass@{k}" for k in ks if k > 1], *majs,
              "format-valid", "tokens/task", "tool calls/task", "tokens/solved"]  # fmt: skip
    body = []
    for name, m in metrics.items():
        if not m.get("runs"):
            body.append([name, "0", *["n/a"] * (len(header) - 2)])
            continue
        se = m.get("pass@1_se")
        body.append(
            [
                name,
                str(m["tasks"]),
                str(m["samples"]),
                f"{m['pass@1']:.1%}" + ("" if se is None else f" ± {se:.1%}"),
                *[cell(m.get(f"pass@{k}"), "{:.1%}") for k in ks if k > 1],
                *[cell(m.get(k), "{:.1%}") for k in majs],
                cell(m["format_valid"], "{:.1%}"),
                cell(m["tokens_per_task"], "{:,.1f}"),
                cell(m["tool_calls_per_task"], "{:.2f}"),
                cell(m["tokens_per_solved"], "{:,.1f}"),
            ]
        )
    return [dict(zip(header, row, strict=True)) for row in body]


def format_metrics_table(metrics: Mapping[str, Mapping[str, Any]], label: str = "family") -> str:
    """The metrics as an aligned plain-text table (rates in percent)."""
    rows = metrics_rows(metrics, label)
    header = list(rows[0]) if rows else [label]
    return aligned_table([header, *[list(r.values()) for r in rows]])


def aligned_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells as text: first column left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def cell(value: Any, fmt: str) -> str:
    """``value`` formatted, or ``n/a`` when it is missing."""
    return "n/a" if value is None else fmt.format(value)
