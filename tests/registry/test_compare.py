"""The paired bootstrap: exact on a hand-made case, the normal approximation on a large one."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import schemas
from coa.evaluate.compare import ALL, bootstrap_interval, compare

from .helpers import rows


def _exact_quantile(values: list[float], q: float) -> float:
    """The q-quantile of the exact bootstrap distribution (each resample equally likely)."""
    ordered = sorted(values)
    return ordered[int(np.floor(q * (len(ordered) - 1)))]


def test_interval_matches_the_enumerated_bootstrap_distribution() -> None:
    diffs = np.array([-1.0, 0.0, 2.0])
    means = [float(np.mean(c)) for c in itertools.product(diffs, repeat=3)]  # all 27 resamples
    low, high = bootstrap_interval(diffs, samples=40_000, confidence=0.9, seed=1)
    assert low == pytest.approx(_exact_quantile(means, 0.05)) == pytest.approx(-2 / 3)
    assert high == pytest.approx(_exact_quantile(means, 0.95)) == pytest.approx(4 / 3)


def test_interval_matches_the_normal_approximation_on_many_pairs() -> None:
    rng = np.random.default_rng(0)
    diffs = rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0], size=2000)
    low, high = bootstrap_interval(diffs, samples=4000, confidence=0.95, seed=3)
    half = 1.96 * diffs.std() / np.sqrt(len(diffs))
    assert low == pytest.approx(diffs.mean() - half, abs=0.005)
    assert high == pytest.approx(diffs.mean() + half, abs=0.005)


def test_compare_joins_on_task_and_sample_and_splits_by_benchmark() -> None:
    def table(values: dict[tuple[str, str, int], bool]) -> object:
        return rows(
            schemas.EVAL,
            [
                {
                    "eval_id": f"{t}:{s}",
                    "task_id": t,
                    "benchmark": b,
                    "family": "math",
                    "sample_index": s,
                    "correct": ok,
                }
                for (b, t, s), ok in values.items()
            ],
        )

    cand = table(
        {("a", "x", 0): True, ("a", "y", 0): True, ("b", "z", 0): False, ("b", "only-cand", 0): True}
    )
    base = table({("a", "x", 0): False, ("a", "y", 0): True, ("b", "z", 0): True, ("a", "x", 1): True})
    out = compare(cand, base, "correct", samples=500)  # type: ignore[arg-type]
    assert set(out) == {"a", "b", ALL}
    assert out["a"].pairs == 2 and out["a"].delta == pytest.approx(0.5)
    assert out["b"].pairs == 1 and out["b"].delta == pytest.approx(-1.0) and out["b"].low == -1.0
    assert out[ALL].pairs == 3 and out[ALL].delta == pytest.approx(0.0)
    assert (
        compare(cand, base, "correct", samples=500, seed=7)["a"]
        == compare(  # type: ignore[arg-type]
            cand,
            base,
            "correct",
            samples=500,
            seed=7,  # type: ignore[arg-type]
        )["a"]
    )
