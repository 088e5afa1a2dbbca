"""Evaluation episodes: each task prompted like its training examples, run by the rollout engine.

A task's prompt is its variant's system prompt (in the configured style) and its question as the
user turn, through the model's chat template, encoded once; ``config.samples`` episodes run per task
(greedy when 1, else sampled at ``temperature`` / ``top_p``) under the evaluation's limits. The
loop itself (generate, run the tool a closing tag calls, append the canonical observation, stop on
``</answer>``, EOS or a limit; a forged observation is a format error) is
:mod:`coa.rollout.engine`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coa.evaluate.config import EvalConfig
from coa.format import system_prompt
from coa.format.from_run import variant_of
from coa.format.prompts import DEFAULT_STYLE
from coa.rollout import Episode, EpisodeSpec, Policy, RolloutConfig, rollout


def rollout_config(config: EvalConfig) -> RolloutConfig:
    """The engine's limits and sampling for an evaluation."""
    sampled = config.samples > 1
    return RolloutConfig(
        **config.limits(),
        concurrency=config.concurrency,
        temperature=config.temperature if sampled else 0.0,
        top_p=config.top_p if sampled else 1.0,
    )


def run_tasks(
    rows: Sequence[Mapping[str, Any]],
    policy: Policy,
    toolbox: Any,
    config: EvalConfig,
    progress: Callable[[int, int], None] | None = None,
) -> list[Episode]:
    """``config.samples`` episodes per task row, task-major (row 0's samples first)."""
    specs = []
    for row in rows:
        variant = variant_of(row["family"], config.variants or {})
        system, _ = system_prompt(variant, config.prompt_style or DEFAULT_STYLE)
        prompt_ids = policy.codec.chat_prompt_ids(system, row["question"])
        specs += [EpisodeSpec(row["task_id"], prompt_ids, k) for k in range(config.samples)]
    return rollout(specs, policy, toolbox, rollout_config(config), progress)
