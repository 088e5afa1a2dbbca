"""AFM's code format in ``code_math``: rendering, our check, AFM's check (re-implemented), extraction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coa.format import render, validate
from coa.format.code import code_format_error, extract_code, render_code

from .afm_rules import afm_code_format_ok
from .samples import AFM, CODE, MATH, traj


def in_code(content: str) -> str:
    return f"<code>\n{content}\n</code>\n"


def test_render_code_layout() -> None:
    assert render_code("print(1)\n") == "```py\nprint(1)\n```"
    assert (
        render_code("n = int(input())\nprint(n)", "7")
        == "```py\nn = int(input())\nprint(n)\n```\n```sh\n7\n```"
    )
    assert render_code("x = 1", "3\n1 2 3\n") == "```py\nx = 1\n```\n```sh\n3\n1 2 3\n```"  # stdin kept as is
    for bad in ("", "\n\n", "print('```')"):
        with pytest.raises(ValueError):
            render_code(bad)


@pytest.mark.parametrize(
    "content,ours,afm",
    [
        ("```py\nprint(1)\n```", True, True),
        ("```py\nprint(1)\n```\n```sh\n5\n```", True, True),
        ("```python\nprint(1)\n```", False, False),  # the format every demo trajectory used to have
        ("```py\nprint(1)\n```\n```py\nprint(2)\n```", False, False),  # two code blocks
        ("```py\nprint(1)\n```\n```sh\n5\n```\nmore text", False, False),  # text after the stdin
        ("```py\nprint(1)\n```\nRun it.", False, False),  # prose after the code
        ("print(1)", False, False),  # unfenced
        ("Let me run:\n```py\nprint(1)\n```", False, True),  # AFM does not look before the block
        ("```py\n\n```", False, True),  # empty code
        ("```py\nprint(1)\n```\n```sh\n5```", False, True),  # closing fence not on its own line
    ],
)
def test_our_check_and_afms(content: str, ours: bool, afm: bool) -> None:
    assert (code_format_error(content) is None) is ours
    assert afm_code_format_ok(in_code(content)) is afm


code_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40).filter(
    lambda s: "```" not in s and s.strip("\n").strip() != ""
)
stdin_text = st.none() | st.text(st.characters(codec="utf-8"), max_size=20).filter(lambda s: "`" not in s)


@settings(max_examples=200, deadline=None)
@given(code_text, stdin_text)
def test_rendered_code_passes_both_checks_and_extracts_back(code: str, stdin: str | None) -> None:
    content = render_code(code, stdin)
    assert code_format_error(content) is None
    assert afm_code_format_ok(in_code(content))
    extracted = extract_code(content)  # what the code tool runs
    assert extracted is not None and extracted.code == code.strip("\n")
    expected_stdin = "" if not stdin else stdin if stdin.endswith("\n") else stdin + "\n"
    assert extracted.stdin == expected_stdin


def test_code_math_grammar_requires_the_format_and_afm_variant_keeps_python() -> None:
    assert validate(traj(MATH), "code_math").ok and validate(traj(CODE), "code_math").ok
    assert afm_code_format_ok(render(traj(MATH))) and afm_code_format_ok(render(traj(CODE)))
    python = [
        (tag, text.replace("```py\n", "```python\n")) if tag == "code" else (tag, text) for tag, text in MATH
    ]
    result = validate(traj(python), "code_math")
    assert result.rule == "code_fence" and result.error is not None and "```py" in result.error.message
    assert not afm_code_format_ok(render(traj(python)))
    lenient = render(traj(MATH)).replace("<code>\n", "<code>\n  \n")  # model-style whitespace
    assert validate(lenient, "code_math", strict=False).ok
    assert validate(traj(AFM), "afm").ok  # AFM_TOOLS asks for ```python; only code_math is AFM's code agent


@pytest.mark.parametrize(
    "payload,code,stdin",
    [
        ("```python\nprint(1)\n```", "print(1)", ""),  # other models keep working
        ("```py\nx = input()\nprint(x)\n```\n```sh\nhi\n```", "x = input()\nprint(x)", "hi\n"),
        ("```\nprint(2)\n```", "print(2)", ""),
        ("print(3)", "print(3)", ""),
    ],
)
def test_code_tool_extraction_stays_lenient(payload: str, code: str, stdin: str) -> None:
    extracted = extract_code(payload)
    assert extracted is not None and (extracted.code, extracted.stdin) == (code, stdin)
