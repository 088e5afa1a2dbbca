"""System prompts per grammar variant, stored as versioned YAML files in ``prompts/``.

Each file holds ``version``, ``variant`` and ``text``. The texts are our own wording of the AFM
rules (tags, transition rules, scoring conventions); the "Order of functions" lines state the
variant's state machine and are checked against :data:`coa.format.grammar.GRAMMARS` by the tests.
Bump ``version`` whenever ``text`` changes.
"""

from __future__ import annotations

import functools
from importlib import resources

import yaml

from coa.format.grammar import VARIANTS


@functools.cache
def system_prompt(variant: str) -> tuple[str, str]:
    """``(text, version)`` of the system prompt of ``variant``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")
    raw = resources.files("coa.format").joinpath("prompts", f"{variant}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(raw)
    if not isinstance(data, dict) or data.get("variant") != variant or not data.get("version"):
        raise ValueError(f"prompts/{variant}.yaml must be a mapping with variant={variant!r} and a version")
    return str(data["text"]).strip(), str(data["version"])
