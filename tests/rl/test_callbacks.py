"""The entropy guard: a window of low-entropy steps stops the run, one noisy step does not."""

from __future__ import annotations

from types import SimpleNamespace

from coa.rl.callbacks import EntropyGuard


def feed(guard: EntropyGuard, entropies: list[float]) -> int | None:
    """Log ``entropies`` one step each; the step at which the guard stopped training (None: never)."""
    control = SimpleNamespace(should_training_stop=False)
    for step, entropy in enumerate(entropies, start=1):
        guard.on_log(None, SimpleNamespace(global_step=step), control, logs={"entropy": entropy})
        if control.should_training_stop:
            return step
    return None


# Demo math after SFT, steps 21-30 of a real run (2026-11-24): one step dipped under 0.005 (logged as 0.0050).
NOISY_BUT_ALIVE = [0.058, 0.011, 0.028, 0.021, 0.022, 0.014, 0.012, 0.013, 0.0057, 0.0049]


def test_one_noisy_step_under_the_floor_is_no_collapse() -> None:
    assert feed(EntropyGuard(0.005, grace_steps=2, window=5), NOISY_BUT_ALIVE) is None
    # the same run under a one-step guard stopped at its last step
    assert feed(EntropyGuard(0.005, grace_steps=2, window=1), NOISY_BUT_ALIVE) == 10


def test_a_sustained_collapse_stops_the_run_with_the_window_mean() -> None:
    guard = EntropyGuard(0.01, grace_steps=2, window=3)
    assert feed(guard, [0.5, 0.3, 0.02, 0.004, 0.003, 0.002]) == 5
    assert guard.tripped is not None
    assert "mean token entropy 0.0090 nats (mean of the last 3 logged steps) fell below the floor 0.01" in (
        guard.tripped
    )


def test_grace_steps_fill_the_window_without_acting() -> None:
    assert feed(EntropyGuard(0.01, grace_steps=3, window=3), [0.001, 0.001, 0.001, 0.5]) is None
    assert feed(EntropyGuard(None, grace_steps=0, window=3), [0.0] * 5) is None
