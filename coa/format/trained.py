"""The prompt format a model was trained on: a fact its lineage carries, not a setting copied.

The convert step renders every SFT example and RL prompt with one system-prompt style
(``convert.prompt_style``) and one variant per family (``convert.variants``); its lineage records
them with its config. A model trained on that data reaches that conversion through its own lineage
(:func:`coa.lineage.trained_on`: the nearest one, so a round fine-tuned on new data is prompted as
that data was rendered), and evaluation and sampling prompt it with :func:`prompt_format` of what
they found, instead of a copy in their own section. A model with no conversion in its lineage (an
external folder or hub id) gets the defaults: the full rules and each family's own variant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, cast

from coa.format.prompts import DEFAULT_STYLE, PROMPT_STYLES, PromptStyle


@dataclasses.dataclass(frozen=True)
class PromptFormat:
    """The system-prompt style and the family → variant overrides a model is prompted with."""

    style: PromptStyle
    variants: Mapping[str, str]
    source: str
    """Where they came from: the conversion's URI, ``config`` (the stage's own setting), both, or
    ``default`` (no conversion in the model's lineage)."""

    def lineage(self) -> dict[str, object]:
        """What a step's lineage records of it (``prompts``)."""
        return {"prompt_style": self.style, "variants": dict(self.variants), "from": self.source}


def of_conversion(uri: str, config: Mapping[str, Any]) -> PromptFormat:
    """The format a conversion recorded (its config's ``prompt_style`` and ``variants``)."""
    style = str(config["prompt_style"])
    if style not in PROMPT_STYLES:
        raise ValueError(f"the conversion {uri} records an unknown prompt style {style!r}")
    variants = cast(Mapping[str, str], config.get("variants") or {})
    return PromptFormat(cast(PromptStyle, style), dict(variants), uri)


def prompt_format(
    style: PromptStyle | None,
    variants: Mapping[str, str] | None,
    trained: PromptFormat | None,
) -> PromptFormat:
    """The format to prompt a model with: a stage's explicit ``style`` / ``variants`` (an override,
    e.g. an ablation), else the model's conversion (``trained``), else the defaults."""
    if style is not None and variants is not None:
        return PromptFormat(style, dict(variants), "config")
    base = trained or PromptFormat(DEFAULT_STYLE, {}, "default")
    if style is None and variants is None:
        return base
    chosen = dict(base.variants if variants is None else variants)
    return PromptFormat(style or base.style, chosen, f"config and {base.source}")
