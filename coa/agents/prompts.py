"""The agents' prompts, stored as versioned YAML data files beside this module."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

ROLES = ("manager", "search_agent", "code_agent", "reflection", "verification")


@functools.cache
def load(role: str) -> dict[str, Any]:
    """The prompt set of one role: its ``version`` and its templates."""
    if role not in ROLES:
        raise KeyError(f"no prompts for {role!r}; roles: {', '.join(ROLES)}")
    text = resources.files("coa.agents").joinpath("prompts", f"{role}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or "version" not in data:
        raise ValueError(f"prompts/{role}.yaml must be a mapping with a 'version'")
    return data


def render(role: str, template: str, **values: str) -> str:
    return str(load(role)[template]).format(**values).strip()


def versions() -> dict[str, str]:
    """Role → prompt version, recorded in every trajectory's teacher config."""
    return {role: str(load(role)["version"]) for role in ROLES}
