"""Answer extraction: the ``answer`` segment, and the math / code / multi-answer forms inside it.

* :func:`extract_answer` returns the content of the single ``answer`` segment. Text is parsed
  leniently (model output need not be canonical); text that does not parse, or has no answer or
  more than one, gives ``None``. Tool output never counts: it sits inside observations, where live
  tags are escaped, so an ``<answer>`` printed by a page is not a segment.
* :func:`extract_boxed`: the content of the last ``\\boxed{...}``, nested and escaped braces included.
* :func:`extract_code_block`: the last fenced ```` ```py ```` / ```` ```python ```` block.
* :func:`split_multi_answers`: the ``|``-separated parts of an MHQA answer, stripped, empties dropped.
"""

from __future__ import annotations

import re

from coa.format.codec import parse
from coa.format.segments import FormatError, Trajectory

_CODE_BLOCK_RE = re.compile(r"```(?:python|py)[ \t]*\n(.*?)^[ \t]*```", re.S | re.M)


def extract_answer(source: Trajectory | str) -> str | None:
    if isinstance(source, str):
        try:
            source = parse(source, strict=False)
        except FormatError:
            return None
    answers = [s.content for s in source.segments if s.tag == "answer"]
    return answers[0] if len(answers) == 1 else None


def extract_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` in ``text`` (braces balanced, ``\{`` ``\}`` skipped)."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i, depth = start + len("\\boxed{"), 1
        body_start = i
        while i < len(text):
            ch = text[i]
            if ch == "\\":
                i += 2
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if depth == 0:
                return text[body_start:i]
            i += 1
        start = text.rfind("\\boxed{", 0, start)  # unbalanced: try an earlier one
    return None


def extract_code_block(text: str) -> str | None:
    """The code of the last fenced Python block (```` ```py ```` or ```` ```python ````)."""
    blocks = _CODE_BLOCK_RE.findall(text)
    return blocks[-1] if blocks else None


def split_multi_answers(answer: str, separator: str = "|") -> list[str]:
    return [part.strip() for part in answer.split(separator) if part.strip()]
