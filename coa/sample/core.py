"""The student's k attempts per training task as ``rollout.v1`` rows, each checked like an evaluation.

Each task is prompted as its training examples were (the variant's system prompt in the convert
section's style, the question as the user turn, the model's chat template) and run ``samples`` times
by the rollout engine at the configured temperature. Every episode becomes a ``rollout.v1`` row:
the ids exactly as sampled, the engine's loss mask, the text, ``correct`` by the task's scorer (the
same rule as the evaluation: math and QA answers by rule, programs by the task's tests in the
sandbox) and ``format_valid`` by the variant's grammar. There is no RL reward here: ``reward`` and
``reward_correct`` are 1 for a correct episode, ``reward_format`` 1 for a valid one, the other terms
0. ``step`` is the round of the model that sampled, ``group`` the task's position in the sampled
list, ``sample`` the episode's index (0..k-1); ``kept`` marks the rows curation may keep (correct
and format-valid). Curation (:mod:`coa.curate.rollouts`) turns those into runs beside the teacher's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coa.format import check_format, system_prompt
from coa.format.from_run import variant_of
from coa.format.prompts import DEFAULT_STYLE
from coa.rollout import EpisodeSpec, Policy, RolloutConfig, model_text, rollout
from coa.sample.config import SampleConfig
from coa.sample.summary import FamilySamples
from coa.scoring.verdicts import score_texts


def select(rows: Sequence[Mapping[str, Any]], config: SampleConfig) -> list[dict[str, Any]]:
    """The training tasks to sample: the configured families, the first ``limit_per_family`` of each."""
    chosen = [dict(r) for r in rows if config.families is None or r["family"] in config.families]
    if config.limit_per_family is None:
        return chosen
    seen: dict[str, int] = {}
    kept = []
    for row in chosen:
        seen[row["family"]] = seen.get(row["family"], 0) + 1
        if seen[row["family"]] <= config.limit_per_family:
            kept.append(row)
    return kept


def rollout_config(config: SampleConfig) -> RolloutConfig:
    """The engine's limits and sampling for the student's attempts."""
    return RolloutConfig(
        **config.limits(),
        concurrency=config.concurrency,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=config.top_k,
    )


def sample_tasks(
    rows: Sequence[dict[str, Any]],
    policy: Policy,
    toolbox: Any,
    config: SampleConfig,
    round_: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """``config.samples`` scored episodes per task row, as ``rollout.v1`` rows (task-major)."""
    variants = config.variants or {}
    specs: list[EpisodeSpec] = []
    prompts: list[tuple[dict[str, Any], str]] = []
    for row in rows:
        variant = variant_of(row["family"], variants)
        system, _ = system_prompt(variant, config.prompt_style or DEFAULT_STYLE)
        ids = policy.codec.chat_prompt_ids(system, row["question"])
        specs += [EpisodeSpec(row["task_id"], ids, k) for k in range(config.samples)]
        prompts += [(row, variant)] * config.samples
    episodes = rollout(specs, policy, toolbox, rollout_config(config), progress)
    texts = [model_text(e, policy) for e in episodes]
    verdicts = score_texts([row for row, _ in prompts], texts)
    out = []
    for i, (episode, text, (row, variant), (_, verdict)) in enumerate(
        zip(episodes, texts, prompts, verdicts, strict=True)
    ):
        valid, _ = check_format(text, variant, episode.format_error)
        correct = bool(verdict.correct)
        out.append(
            {
                "task_id": row["task_id"],
                "prompt_id": f"{row['task_id']}@{variant}",
                "variant": variant,
                "group": i // config.samples,
                "sample": episode.sample_index,
                "step": round_,
                "prompt_ids": list(episode.prompt_ids),
                "completion_ids": list(episode.completion_ids),
                "loss_mask": list(episode.mask),
                "text": episode.text,
                "reward": float(correct),
                "reward_correct": float(correct),
                "reward_format": float(valid),
                "reward_efficiency": 0.0,
                "reward_overlong": 0.0,
                "correct": correct,
                "format_valid": valid,
                "tool_calls": len(episode.tool_calls),
                "tokens": episode.completion_tokens,
                "finish": episode.finish or "",
                "kept": correct and valid,
            }
        )
    return out


def counts(rows: Sequence[Mapping[str, Any]], family_of: Mapping[str, str]) -> dict[str, FamilySamples]:
    """Per family (and ``all``): tasks, episodes, correct and format-valid shares, rows kept, the
    share of tasks solved at least once (pass@k) and of tasks whose episodes all agree (all correct,
    all wrong): with ``samples`` = RL's group size, what GRPO could learn from these tasks."""
    families: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        families.setdefault(family_of[row["task_id"]], []).append(row)
    families["all"] = list(rows)
    out = {}
    for family, group in families.items():
        n = len(group)
        tasks = {r["task_id"] for r in group}
        solved = {r["task_id"] for r in group if r["correct"] and r["format_valid"]}
        right: dict[str, list[bool]] = {}
        for r in group:
            right.setdefault(r["task_id"], []).append(bool(r["correct"]))
        out[family] = FamilySamples(
            tasks=len(tasks),
            episodes=n,
            correct=sum(bool(r["correct"]) for r in group) / n if n else 0.0,
            format_valid=sum(bool(r["format_valid"]) for r in group) / n if n else 0.0,
            kept=sum(bool(r["correct"] and r["format_valid"]) for r in group),
            tasks_solved=len(solved) / len(tasks) if tasks else 0.0,
            all_correct=sum(all(v) for v in right.values()) / len(tasks) if tasks else 0.0,
            all_wrong=sum(not any(v) for v in right.values()) / len(tasks) if tasks else 0.0,
        )
    return out
