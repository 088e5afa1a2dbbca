"""Every key a profile (``configs/*.yaml``) sets is a key of the generated configuration reference.

The reference page (``docs/_hooks/reference.py``, ``reference/config.md``) is walked from the code's
models, so a profile key it does not list is one a reader cannot look up (a key renamed in the code
but left in a file, a section the reference's walk misses). Each file is read by itself, ``base.yaml``
too, before any merge: a key is checked where it is written. Loading each profile (``test_config``)
checks the values; this checks the file against the documentation.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROFILES = sorted((REPO / "configs").glob("*.yaml"))


def _reference_keys() -> set[str]:
    spec = importlib.util.spec_from_file_location(
        "coa_docs_reference", REPO / "docs" / "_hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    keys: set[str] = module.config_keys()
    return keys


def profile_keys(data: Any, keys: set[str], prefix: str = "") -> Iterator[str]:
    """The reference form of every key ``data`` sets under ``prefix``: a mapping's keys and a list's
    items become ``NAME`` / ``N`` where the reference has them; a value the reference does not open
    (a ``dict[str, int]``, a list of strings) is a leaf."""
    if isinstance(data, dict):
        items: list[tuple[str, Any]] = [(str(k), v) for k, v in data.items()]
        if prefix and not any(k.startswith(prefix) for k in keys):
            return
        if prefix and any(k.startswith(prefix + "NAME.") for k in keys):
            items = [("NAME", v) for _, v in items]
    elif isinstance(data, list) and any(k.startswith(prefix + "N.") for k in keys):
        items = [("N", v) for v in data]
    else:
        return
    for name, value in items:
        if name == "inherit" and not prefix:
            continue  # the file's parent, not a config key
        key = prefix + name
        yield key
        if key in keys or name in ("N", "NAME"):
            yield from profile_keys(value, keys, key + ".")


@pytest.fixture(scope="module")
def reference_keys() -> set[str]:
    return _reference_keys()


@pytest.mark.parametrize("path", PROFILES, ids=[p.name for p in PROFILES])
def test_every_profile_key_is_in_the_reference(path: Path, reference_keys: set[str]) -> None:
    data = yaml.safe_load(path.read_text()) or {}
    written = list(profile_keys(data, reference_keys))
    assert written, path
    missing = sorted({k for k in written if k not in reference_keys and not k.endswith((".N", ".NAME"))})
    assert missing == [], f"{path.name} sets keys the configuration reference does not list: {missing}"


def test_a_key_missing_from_the_reference_is_found(reference_keys: set[str]) -> None:
    data = {
        "inherit": "base.yaml",
        "sft": {"max_steps": 3, "max_stepz": 3, "repeat": {"code": 2}},
        "round_sft": {"learning_rate": 1e-4},
        "endpoints": {"t": {"modle": "x"}},
        "collect": {"llm": {"endpoints": ["t"]}, "tools": "web"},
    }
    written = set(profile_keys(data, reference_keys))
    assert {
        "sft.max_steps",
        "sft.repeat",
        "round_sft.learning_rate",
        "endpoints.NAME.modle",
        "collect.llm.endpoints",
        "collect.tools",
    } <= written
    assert "sft.repeat.code" not in written and "inherit" not in written  # a dict[str, int] is one value
    missing = {k for k in written if k not in reference_keys and not k.endswith((".N", ".NAME"))}
    assert missing == {"sft.max_stepz", "endpoints.NAME.modle"}
