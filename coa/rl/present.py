"""What a front end shows of an RL step (:data:`coa.plan.stages.PRESENTERS`): curves, figures, alarms."""

from __future__ import annotations

import base64
from typing import Any

from coa import io
from coa.facts import Facts, Markdown, Table, show
from coa.pages import percent_by_family
from coa.rl.summary import FamilyChoice, RLSummary
from coa.steps import StepResult

CURVE_KEYS = (
    "step",
    "reward",
    "rewards/correct/mean",
    "rewards/format/mean",
    "entropy",
    "dynamic/zero_variance_share",
)


def _family_markdown(choice: FamilyChoice | None) -> str:
    """The family ``rl.families: auto`` picked, why, and its warning when it fell back."""
    if not choice:
        return ""
    scores = percent_by_family(choice.accuracy)
    warning = f" **Warning:** {choice.warning}" if choice.warning else ""
    why = f"{choice.rule}; held-out accuracy after SFT: {scores}"
    left_out = "".join(f" Left out: {f} ({reason})." for f, reason in sorted(choice.excluded.items()))
    return f"Family: **{choice.family}** ({why}).{left_out}{warning}\n\n"


def _signal_markdown(s: RLSummary) -> str:
    """How much the rollouts could teach: correct episodes, groups with one, mixed groups."""
    sig = s.learning_signal
    if sig is None:
        return ""
    return (
        f"Learning signal: {sig.correct_share:.1%} of episodes correct; "
        f"{sig.groups_with_a_correct_episode:,} of {sig.groups:,} groups held a correct one, "
        f"{sig.mixed_groups:,} mixed.\n\n"
    )


def _heldout_markdown(points: list[dict[str, Any]]) -> str:
    """The held-out score per evaluation (greedy rollouts of prompts kept out of training)."""
    if not points:
        return ""
    lines = ["", "", "| step | held-out correct | held-out valid | held-out reward |", "|---|---|---|---|"]
    lines += [
        f"| {int(p['step'])} | {show(p.get('correct'))} | {show(p.get('format_valid'))} | "
        f"{show(p.get('reward'))} |"
        for p in points
    ]
    return "\n".join(lines)


def present(s: RLSummary, result: StepResult) -> Facts:
    """The curves (an image and their points), the run's figures, the family choice; the
    reward-hacking alarm and the no-learning-signal warning as warnings."""
    png = base64.b64encode(io.read_file(result.ref, "rl_curves.png")).decode()
    alarm = s.alarm
    text = (
        "# RL (GRPO/DAPO)\n\n"
        + (f"**Reward-hacking alarm:** {alarm}\n\n" if alarm else "")
        + (f"**No learning signal:** {s.no_signal}\n\n" if s.no_signal else "")
        + _family_markdown(s.family_choice)
        + _signal_markdown(s)
        + f"![reward, entropy, zero-variance share](data:image/png;base64,{png})\n\n"
        "| steps run / planned | rollouts | seconds | last reward | last entropy | device |\n"
        "|---|---|---|---|---|---|\n"
        f"| {s.steps_run} / {s.steps_planned} | {show(s.rollouts)} | {show(s.train_runtime_s)} | "
        f"{show(s.final_reward)} | {show(s.final_entropy)} | {s.device} |\n\nModel: `{result.ref.uri}`"
        + _heldout_markdown(list(s.heldout))
    )
    described = "Reward per term, entropy and zero-variance share of the RL run"
    return Facts(
        (
            Markdown("curves", text, described + (": REWARD-HACKING ALARM" if alarm else "")),
            Table(
                "curve-points",
                [{k: show(p.get(k)) for k in CURVE_KEYS} for p in s.curves],
                f"RL curves per logged step: {result.ref.uri}",
            ),
        ),
        warnings=tuple(
            m for m in (alarm, s.family_choice.warning if s.family_choice else None, s.no_signal) if m
        ),
    )
