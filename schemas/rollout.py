"""``rollout.v1``: one RL episode exactly as it was sampled and trained on, with its rewards.

The ids are the token record of the rollout engine: ``completion_ids`` are the policy's sampled
ids and the environment's ids (observations, the newline that closes a block, the end-of-turn)
in order, never re-tokenized; ``loss_mask`` says which were trained. Rows of groups that dynamic
sampling dropped are kept too (``kept`` false), so the table is every rollout the run paid for.
``policy_version`` and ``behaviour_logprobs`` (nullable: older tables lack them and still read)
say which weights sampled each episode and how likely each sampled id was under them.
"""

import pyarrow as pa

from schemas._contract import Column, Contract
from schemas.sft import VARIANTS

FINISHES = ("answer", "eos", "format_error", "generation_limit", "token_limit", "turn_limit")

ROLLOUT = Contract(
    name="rollout",
    version=1,
    doc="An RL rollout: prompt and completion ids as sampled, loss mask, text, each reward term.",
    columns=(
        Column("task_id", pa.string(), "The task.v1 id the prompt was made from."),
        Column("prompt_id", pa.string(), "The rl_prompt.v1 prompt id."),
        Column(
            "variant",
            pa.string(),
            "CoA grammar variant the prompt asked for (null in tables written before it was recorded).",
            nullable=True,
            allowed=VARIANTS,
        ),
        Column("group", pa.int64(), "GRPO group key: the prompt's group_index."),
        Column("sample", pa.int32(), "Index of the episode within its group (0..group_size-1)."),
        Column("step", pa.int32(), "Optimizer step (global) at which the batch was generated."),
        Column("prompt_ids", pa.list_(pa.int32()), "Prompt token ids (chat template, generation prompt)."),
        Column(
            "completion_ids",
            pa.list_(pa.int32()),
            "Completion token ids: sampled ids exactly as generated, environment ids between them.",
        ),
        Column(
            "loss_mask",
            pa.list_(pa.int8()),
            "Per completion id: 1 = sampled by the policy and trained, 0 = environment (or a truncated "
            "episode, masked whole).",
        ),
        Column("text", pa.string(), "Decode of completion_ids."),
        Column("reward", pa.float64(), "Total reward: the weighted sum of the terms below."),
        Column("reward_correct", pa.float64(), "Correctness term: 1 when the task's check passed."),
        Column("reward_format", pa.float64(), "Format term: 1 when the trajectory is valid for its variant."),
        Column("reward_efficiency", pa.float64(), "Tool-call efficiency term (<= 0)."),
        Column("reward_overlong", pa.float64(), "Soft overlong penalty (0 to -1)."),
        Column("correct", pa.bool_(), "The final answer passed the task's check."),
        Column("format_valid", pa.bool_(), "The trajectory is valid under its variant's grammar."),
        Column("tool_calls", pa.int32(), "Tools the episode ran."),
        Column("tokens", pa.int32(), "Tokens the policy generated (environment ids not counted)."),
        Column("finish", pa.string(), "Why the episode ended.", allowed=FINISHES),
        Column(
            "kept",
            pa.bool_(),
            "In the training batch (false: its group was dropped by dynamic sampling, or as too stale in "
            "async RL).",
        ),
        Column(
            "policy_version",
            pa.int64(),
            "Policy (weight) version the episode was sampled with: the trainer's optimizer step of those "
            "weights; the oldest when its generations span an update (null in tables written before it "
            "was recorded).",
            nullable=True,
        ),
        Column(
            "old_kv",
            pa.bool_(),
            "A generation of the episode ran across a weight push that kept its KV cache (vLLM's "
            "pause mode keep, SGLang's in_place): ids after the push may be new weights over old-weight "
            "KV, so behaviour logprobs there are of neither version (null in tables written before it "
            "was recorded).",
            nullable=True,
        ),
        Column(
            "behaviour_logprobs",
            pa.list_(pa.float32()),
            "Per completion id: the logprob the sampling policy gave it (the importance-correction "
            "denominator); null on environment ids (null list in tables written before it was recorded).",
            nullable=True,
        ),
    ),
)
