"""System prompts per grammar variant, stored as versioned YAML files in ``prompts/``.

Each file holds ``version``, ``variant``, ``text`` (the full rules) and ``brief`` (one line, for
small students whose context is better spent on the trajectory; ``convert.prompt_style: brief``).
The texts are our own wording of the AFM rules (tags, transition rules, scoring conventions); the
"Order of functions" lines state the variant's state machine and are checked against
:data:`coa.format.grammar.GRAMMARS` by the tests. Bump ``version`` whenever ``text`` changes.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Literal

import yaml

from coa.format.grammar import VARIANTS

PromptStyle = Literal["full", "brief"]
PROMPT_STYLES: tuple[PromptStyle, ...] = ("full", "brief")
DEFAULT_STYLE: PromptStyle = "full"
"""The style of a model with no conversion in its lineage (:mod:`coa.format.trained`): the full rules."""


@functools.cache
def system_prompt(variant: str, style: PromptStyle = "full") -> tuple[str, str]:
    """``(text, version)`` of the system prompt of ``variant`` (``brief``: version ends in ``-brief``)."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; styles: {', '.join(PROMPT_STYLES)}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")
    raw = resources.files("coa.format").joinpath("prompts", f"{variant}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(raw)
    if not isinstance(data, dict) or data.get("variant") != variant or not data.get("version"):
        raise ValueError(f"prompts/{variant}.yaml must be a mapping with variant={variant!r} and a version")
    if style == "brief":
        if not data.get("brief"):
            raise ValueError(f"prompts/{variant}.yaml has no `brief` prompt")
        return str(data["brief"]).strip(), f"{data['version']}-brief"
    return str(data["text"]).strip(), str(data["version"])
