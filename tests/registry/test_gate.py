"""The promotion gate on hand-built lineage: refuse a regression, promote a gain, every check bites."""

from __future__ import annotations

from pathlib import Path

from coa.registry.gate import GateConfig, apply, decide
from coa.registry.store import Registry

from . import helpers

GOOD = GateConfig(margin=0.05, bootstrap_samples=500)
HALF = [True, False] * 10  # 20 tasks, 50% correct
BETTER = [True] * 16 + [False] * 4


def _candidate(tag: str, correct: dict[str, list[bool]], **kw: object) -> tuple[str, str]:
    tasks = helpers.tasks()
    cur = helpers.curated(tasks, **kw)  # type: ignore[arg-type]
    model = helpers.model(cur, tag)
    return model.uri, helpers.evaluation(tasks, model, correct).uri


def test_first_candidate_improving_candidate_and_regressing_candidate(storage_root: Path) -> None:
    reg = Registry()
    m1, e1 = _candidate("m1", {"math": HALF, "search": HALF})
    first = decide(GOOD, e1, None)
    assert first.promote and "no champion yet" in first.reasons[-1]
    assert apply(reg, "agent", m1, first, {"heldout": e1}) is not None

    m2, e2 = _candidate("m2", {"math": BETTER, "search": HALF})
    better = decide(GOOD, e2, e1)
    assert better.promote, better.reasons
    assert better.per_benchmark["math"].delta > 0.25 and not better.per_benchmark["search"].regression
    apply(reg, "agent", m2, better, {"heldout": e2})
    assert reg.resolve("agent") == m2

    # gains on math, collapses on search: refused with that reason, the champion stays
    m3, e3 = _candidate("m3", {"math": [True] * 20, "search": [False] * 20})
    worse = decide(GOOD.model_copy(update={"primary_benchmark": "math"}), e3, e2)
    assert not worse.promote and not worse.checks["no_regression"] and worse.checks["gain"]
    assert any(r.startswith("regression on search") for r in worse.reasons), worse.reasons
    assert apply(reg, "agent", m3, worse, {"heldout": e3}) is None
    assert reg.resolve("agent") == m2
    last = reg.history("agent")[-1]
    assert last.event == "candidate" and last.model_uri == m3 and last.verdict is not None
    assert any("regression on search" in r for r in last.reasons)

    assert reg.rollback("agent").model_uri == m1


def test_no_gain_is_refused(storage_root: Path) -> None:
    _, e1 = _candidate("m1", {"math": HALF})
    _, e2 = _candidate("m2", {"math": HALF})
    verdict = decide(GOOD, e2, e1)
    assert not verdict.promote and verdict.checks == {**verdict.checks, "gain": False, "no_regression": True}
    assert any(r.startswith("no gain") for r in verdict.reasons)


def test_small_dip_within_margin_passes_and_beyond_is_refused(storage_root: Path) -> None:
    base = [True] * 200 + [False] * 200
    dip = [True] * 198 + [False] * 202  # -0.5 points on search
    _, e1 = _candidate("m1", {"math": base, "search": base})
    _, e2 = _candidate("m2", {"math": [True] * 300 + [False] * 100, "search": dip})
    assert decide(GateConfig(margin=0.05, bootstrap_samples=500), e2, e1).promote
    assert not decide(GateConfig(margin=0.0, bootstrap_samples=500), e2, e1).promote


def test_lineage_checks_refuse(storage_root: Path) -> None:
    _, bad_gate = _candidate("g", {"math": BETTER}, gate_ok=False)
    verdict = decide(GOOD, bad_gate, None)
    assert not verdict.promote and not verdict.checks["data_quality"]
    assert any("data-quality gate failed" in r for r in verdict.reasons)

    _, leaked = _candidate("l", {"math": BETTER}, leak="h2")
    verdict = decide(GOOD, leaked, None)
    assert not verdict.checks["decontamination"] and any("task h2" in r for r in verdict.reasons)

    tasks = helpers.tasks()
    short = helpers.model(helpers.curated(tasks), "short", steps_run=3, steps_planned=4)
    verdict = decide(GOOD, helpers.evaluation(tasks, short, {"math": BETTER}).uri, None)
    assert not verdict.promote and not verdict.checks["steps"]
    assert any("ran 3 of 4 planned steps" in r for r in verdict.reasons)


def test_a_reward_hacking_alarm_in_the_lineage_refuses_unless_allowed(storage_root: Path) -> None:
    tasks = helpers.tasks()
    alarmed = helpers.model(helpers.curated(tasks), "hacked", alarm="reward +0.30 while held-out -0.20")
    evaluation = helpers.evaluation(tasks, alarmed, {"math": BETTER}).uri
    verdict = decide(GOOD, evaluation, None)
    assert not verdict.promote and not verdict.checks["reward_alarm"]
    assert any("reward-hacking alarm" in r and "held-out -0.20" in r for r in verdict.reasons)
    allowed = decide(GOOD.model_copy(update={"refuse_alarm": False}), evaluation, None)
    assert allowed.promote and allowed.checks["reward_alarm"]


def test_a_candidate_gated_against_a_stale_champion_is_not_promoted(storage_root: Path) -> None:
    """Two nights at once: both gated against m1; the second to promote finds m1 replaced and is refused."""
    import pytest

    from coa.registry.store import RegistryError

    reg = Registry()
    m1, e1 = _candidate("m1", {"math": HALF, "search": HALF})
    apply(reg, "agent", m1, decide(GOOD, e1, None), {"heldout": e1}, if_champion=None)
    a, ea = _candidate("a", {"math": BETTER, "search": HALF})
    b, eb = _candidate("b", {"math": [True] * 18 + [False] * 2, "search": HALF})
    va, vb = decide(GOOD, ea, e1), decide(GOOD, eb, e1)
    assert va.promote and vb.promote
    apply(reg, "agent", a, va, {"heldout": ea}, if_champion=m1)
    with pytest.raises(RegistryError, match="changed while"):
        apply(reg, "agent", b, vb, {"heldout": eb}, if_champion=m1)
    assert reg.resolve("agent") == a
    assert [e.model_uri for e in reg.history("agent") if e.event == "promote"] == [m1, a]
