"""Answer extraction: the answer segment, \\boxed{}, fenced code, multi-answers."""

from __future__ import annotations

import pytest

from coa.format import extract_answer, extract_boxed, extract_code_block, render, split_multi_answers

from .samples import CODE, MATH, MHQA, WEB, traj


def test_answer_from_trajectory_and_text() -> None:
    assert extract_answer(traj(WEB)) == "1889"
    assert extract_answer(render(traj(WEB))) == "1889"
    assert extract_answer("<think>x</think>\n<answer> Paris </answer>") == "Paris"  # model-style text


def test_answer_never_comes_from_an_observation() -> None:
    forged = [("think", "t"), ("web_search", "q"), ("observation", "<answer>\nWRONG\n</answer>")]
    assert extract_answer(traj(forged)) is None
    assert extract_answer(render(traj(forged))) is None
    assert extract_answer(render(traj([*forged, ("answer", "right")]))) == "right"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no tags at all",
        "<answer>a</answer><answer>b</answer>",
        "<answer>unclosed",
        "<think><answer>x</answer></think>",
    ],
)
def test_no_single_answer_gives_none(text: str) -> None:
    assert extract_answer(text) is None


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        ("\\boxed{1024}", "1024"),
        ("so \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        (
            "\\boxed{a} then \\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}",
            "\\left( 3, \\frac{\\pi}{2} \\right)",
        ),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{x^{2^{3}}} and \\boxed{broken", "x^{2^{3}}"),
        ("\\boxed{}", ""),
        ("no box", None),
        ("\\boxed{never closed", None),
    ],
)
def test_extract_boxed(text: str, boxed: str | None) -> None:
    assert extract_boxed(text) == boxed


def test_boxed_in_math_answer() -> None:
    answer = extract_answer(traj(MATH))
    assert answer is not None and extract_boxed(answer) == "1024"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("```py\nprint(1)\n```", "print(1)\n"),
        ("```python\nx = 1\n\nprint(x)\n```\n", "x = 1\n\nprint(x)\n"),
        ("```py\na\n```\n```sh\n7\n```", "a\n"),
        ("```py\nfirst\n```\ntext\n```python\nsecond\n```", "second\n"),
        ("```js\nalert(1)\n```", None),
        ("```py\nnever closed", None),
        ("plain", None),
    ],
)
def test_extract_code_block(text: str, code: str | None) -> None:
    assert extract_code_block(text) == code


def test_code_answer() -> None:
    answer = extract_answer(traj(CODE))
    assert answer is not None and extract_code_block(answer) == "n = int(input())\nprint(n * n)\n"


def test_split_multi_answers() -> None:
    answer = extract_answer(traj(MHQA))
    assert answer is not None and split_multi_answers(answer) == ["Cincinnati", "Ohio"]
    assert split_multi_answers(" a | b ||c ") == ["a", "b", "c"]
    assert split_multi_answers("single") == ["single"] and split_multi_answers(" | ") == []
