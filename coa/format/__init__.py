"""coa.format: the single owner of the Chain-of-Agents trajectory format.

Every stage (collection, conversion, SFT, RL, evaluation) reads and writes trajectories through
this package, so that training and inference see the same bytes. Pure functions, no Prefect.

Modules:

* :mod:`~coa.format.segments`: tags, ``Segment`` / ``Trajectory``, reflection grades and
  double-check scores, ``FormatError``;
* :mod:`~coa.format.codec`: ``render`` / ``parse`` (the canonical ``<tag>\\n…\\n</tag>\\n`` text)
  and observation escaping;
* :mod:`~coa.format.grammar`: the ``web`` / ``mhqa`` / ``code_math`` / ``afm`` state machines and
  ``validate``;
* :mod:`~coa.format.answers`: answer, ``\\boxed{}``, code-block and multi-answer extraction;
* :mod:`~coa.format.masks`: observation character spans (found, or checked against the text) and
  per-token loss labels;
* :mod:`~coa.format.prompts`: versioned system prompts per variant;
* :mod:`~coa.format.code`: AFM's ```` ```py ```` / ```` ```sh ```` code format of ``code_math`` and
  ``extract_code``, the reading of a ``<code>`` payload the code tool runs;
* :mod:`~coa.format.afm`: AFM SFT (alpaca JSON) and RL (Parquet row) layouts, AFM reward routing;
* :mod:`~coa.format.chat`: a ChatML training template whose ``{% generation %}`` blocks leave out
  the observations (plain TRL ``assistant_only_loss``);
* :mod:`~coa.format.check`: ``check_format`` (one model output against its variant: evaluation, RL
  rewards, sampling) and ``check_rows``, the hook of ``coa format check``.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coa.format.afm import (
        AfmTarget,
        afm_rl_group,
        afm_sft_dataset_entry,
        afm_target,
        afm_user_turn,
        render_afm_sft,
        to_afm_rl_row,
        to_afm_sft_record,
        to_mhqa,
    )
    from coa.format.answers import extract_answer, extract_boxed, extract_code_block, split_multi_answers
    from coa.format.check import check_format, check_rows
    from coa.format.codec import escape_observation, parse, render, unescape_observation
    from coa.format.masks import (
        IGNORE_INDEX,
        chat_text,
        check_observation_spans,
        label_chat,
        observation_spans,
        token_labels,
    )
from coa.format.grammar import GRAMMARS, VARIANTS, Grammar, ValidationResult, validate
from coa.format.prompts import system_prompt
from coa.format.segments import (
    ENV_TAGS,
    ROLE_TAGS,
    TAGS,
    TOOL_TAGS,
    FormatError,
    ReflectionGrades,
    Segment,
    Trajectory,
    parse_double_check,
    parse_reflection,
)

__all__ = [
    "ENV_TAGS",
    "AfmTarget",
    "GRAMMARS",
    "IGNORE_INDEX",
    "ROLE_TAGS",
    "TAGS",
    "TOOL_TAGS",
    "VARIANTS",
    "afm_rl_group",
    "afm_sft_dataset_entry",
    "afm_target",
    "afm_user_turn",
    "FormatError",
    "Grammar",
    "ReflectionGrades",
    "Segment",
    "Trajectory",
    "ValidationResult",
    "chat_text",
    "check_format",
    "check_observation_spans",
    "check_rows",
    "escape_observation",
    "extract_answer",
    "extract_boxed",
    "extract_code_block",
    "label_chat",
    "observation_spans",
    "parse",
    "parse_double_check",
    "parse_reflection",
    "render",
    "render_afm_sft",
    "split_multi_answers",
    "system_prompt",
    "to_afm_rl_row",
    "to_afm_sft_record",
    "to_mhqa",
    "token_labels",
    "unescape_observation",
    "validate",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in (
        "AfmTarget",
        "afm_rl_group",
        "afm_sft_dataset_entry",
        "afm_target",
        "afm_user_turn",
        "render_afm_sft",
        "to_afm_rl_row",
        "to_afm_sft_record",
        "to_mhqa",
    ):
        from coa.format import afm

        return getattr(afm, name)
    if name in ("extract_answer", "extract_boxed", "extract_code_block", "split_multi_answers"):
        from coa.format import answers

        return getattr(answers, name)
    if name in ("check_format", "check_rows"):
        from coa.format import check

        return getattr(check, name)
    if name in ("escape_observation", "parse", "render", "unescape_observation"):
        from coa.format import codec

        return getattr(codec, name)
    if name in (
        "IGNORE_INDEX",
        "chat_text",
        "check_observation_spans",
        "label_chat",
        "observation_spans",
        "token_labels",
    ):
        from coa.format import masks

        return getattr(masks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
