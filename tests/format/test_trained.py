"""The prompt format a model is prompted with: its conversion's (from its lineage), a stage's
override, or the defaults for a model with no conversion upstream. The lineage walk itself, on a
real built pipeline, is ``tests/test_summary_contracts.py``'s
``test_evaluation_and_sampling_prompt_as_their_model_was_trained``."""

from __future__ import annotations

import pytest

from coa.format.trained import PromptFormat, of_conversion, prompt_format

CONVERSION = "/store/converted/coa-1a2b"


def test_the_model_s_conversion_is_used_unless_a_stage_overrides_it() -> None:
    trained = of_conversion(CONVERSION, {"prompt_style": "brief", "variants": {"math": "code_math"}})
    assert trained == PromptFormat("brief", {"math": "code_math"}, CONVERSION)
    assert prompt_format(None, None, trained) == trained
    # an explicit style keeps the conversion's variants, and says both sources
    assert prompt_format("full", None, trained) == PromptFormat(
        "full", {"math": "code_math"}, f"config and {CONVERSION}"
    )
    assert prompt_format("full", {}, trained) == PromptFormat("full", {}, "config")


def test_a_model_with_no_conversion_upstream_gets_the_defaults() -> None:
    assert prompt_format(None, None, None) == PromptFormat("full", {}, "default")
    assert prompt_format("brief", None, None).lineage() == {
        "prompt_style": "brief",
        "variants": {},
        "from": "config and default",
    }


def test_a_conversion_with_an_unknown_style_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown prompt style 'tiny'"):
        of_conversion(CONVERSION, {"prompt_style": "tiny"})
