"""Paired comparison of two evaluations: per-benchmark metric deltas with a paired bootstrap interval.

Two ``eval.v1`` tables (a candidate and a baseline on the same tasks) are joined on ``(task_id,
sample_index)``; only the pairs present in both count. Per benchmark, the delta is the mean of the
per-pair differences ``candidate - baseline`` of a metric column (``correct``, ``format_valid``:
booleans as 0/1; ``score``). Its interval is the percentile interval of the means of ``samples``
bootstrap resamples of the pairs (drawn with replacement, seeded), so a task that both models solve
or both fail adds no noise: the pairing is what makes small evaluations decisive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from coa.evaluate.names import ALL, METRICS

_CHUNK = 2_000_000  # pair draws per bootstrap chunk (memory bound)


@dataclasses.dataclass(frozen=True)
class Delta:
    """The paired delta of one metric on one benchmark."""

    benchmark: str
    metric: str
    pairs: int
    candidate: float
    baseline: float
    delta: float
    low: float
    high: float
    confidence: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def points(self) -> str:
        """The delta and its interval in percentage points of a rate: ``+9.0 [+4.5, +13.5]``."""
        return f"{100 * self.delta:+.1f} [{100 * self.low:+.1f}, {100 * self.high:+.1f}]"

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly on one side of 0 (a change the pairs cannot explain away)."""
        return self.low > 0 or self.high < 0


def paired_values(
    candidate: pa.Table, baseline: pa.Table, metric: str
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Benchmark → (candidate values, baseline values), aligned pair by pair, sorted by key."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")

    def index(table: pa.Table) -> dict[tuple[str, int], tuple[str, float]]:
        cols = table.select(["task_id", "sample_index", "benchmark", metric]).to_pydict()
        return {
            (t, int(s)): (b, float(v))
            for t, s, b, v in zip(
                cols["task_id"], cols["sample_index"], cols["benchmark"], cols[metric], strict=True
            )
        }

    cand, base = index(candidate), index(baseline)
    out: dict[str, tuple[list[float], list[float]]] = {}
    for key in sorted(cand.keys() & base.keys()):
        bench, value = cand[key]
        a, b = out.setdefault(bench, ([], []))
        a.append(value)
        b.append(base[key][1])
    return {k: (np.asarray(a), np.asarray(b)) for k, (a, b) in sorted(out.items())}


def bootstrap_interval(
    differences: np.ndarray, samples: int, confidence: float, seed: int
) -> tuple[float, float]:
    """The percentile interval of the mean of ``differences`` over ``samples`` paired resamples."""
    n = len(differences)
    if n == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    per_chunk = max(1, _CHUNK // n)
    for start in range(0, samples, per_chunk):
        stop = min(samples, start + per_chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = differences[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def compare(
    candidate: pa.Table,
    baseline: pa.Table,
    metric: str = "correct",
    samples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    benchmarks: Sequence[str] | None = None,
) -> dict[str, Delta]:
    """Per benchmark, and ``all`` over every pair: the paired delta and its bootstrap interval."""
    per = paired_values(candidate, baseline, metric)
    if benchmarks is not None:
        per = {k: v for k, v in per.items() if k in set(benchmarks)}
    if per:
        per[ALL] = (
            np.concatenate([a for a, _ in per.values()]),
            np.concatenate([b for _, b in per.values()]),
        )
    out = {}
    for i, (bench, (a, b)) in enumerate(per.items()):
        diff = a - b
        low, high = bootstrap_interval(diff, samples, confidence, seed + i)
        out[bench] = Delta(
            benchmark=bench,
            metric=metric,
            pairs=len(diff),
            candidate=float(a.mean()) if len(a) else float("nan"),
            baseline=float(b.mean()) if len(b) else float("nan"),
            delta=float(diff.mean()) if len(diff) else float("nan"),
            low=low,
            high=high,
            confidence=confidence,
        )
    return out


def scorer_mismatch(candidate: pa.Table, baseline: pa.Table) -> dict[str, tuple[list[str], list[str]]]:
    """Benchmarks whose rows the two evaluations scored with different scorers (``eval.v1`` ``scorer``
    and ``scorer_version``; "unrecorded" for tables written before them): their deltas mix two rules."""

    def scorers(table: pa.Table) -> dict[str, set[str]]:
        names = table.column_names
        cols = table.select([c for c in ("benchmark", "scorer", "scorer_version") if c in names]).to_pylist()
        out: dict[str, set[str]] = {}
        for row in cols:
            name = row.get("scorer")
            label = "unrecorded" if name is None else f"{name} v{row.get('scorer_version')}"
            out.setdefault(row["benchmark"], set()).add(label)
        return out

    cand, base = scorers(candidate), scorers(baseline)
    return {
        b: (sorted(cand[b]), sorted(base[b])) for b in sorted(set(cand) & set(base)) if cand[b] != base[b]
    }
