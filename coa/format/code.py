"""The code format of the ``code_math`` variant: AFM's ```` ```py ```` block and optional stdin block.

AFM's code and math prompts, and the code-format check of its RL reward (``afm-spec.md`` §1.3,
§4.4), want the content of every ``<code>`` to be exactly one fenced ```` ```py ```` block, then
optionally one fenced ```` ```sh ```` block whose content is fed to the program as standard input,
and nothing else. Models trained on one strict code format carry it poorly to another, so the
pipeline writes this one everywhere: conversion re-fences the teacher's code with
:func:`render_code`, the ``code_math`` grammar rejects any other ``<code>`` content through
:func:`code_format_error` (rule ``code_fence``), and the offline teacher writes it directly.

The canonical content is::

    ```py
    <code: no ``` anywhere>
    ```
    ```sh
    <stdin, ending with a newline>
    ```

The stdin block is left out when the program reads nothing. Tools stay lenient on purpose: the
code tool still runs ```` ```python ````, bare fences and unfenced code from other models
(:func:`extract_code`); only trajectories written as training data must be canonical.

:func:`extract_code` parses a ``<code>`` payload the way AFM's executor does: text after an
``<answer>`` tag only, when there is one; the ```` ```py ```` / ```` ```python ```` blocks joined
by a blank line; the ```` ```sh ```` / ```` ```bash ```` blocks joined by ``\\n`` as stdin. Unlike
AFM (whose fallback path crashes, so a fence is effectively mandatory there) an unfenced payload
that compiles as Python is run as is, as are bare ```` ``` ```` blocks when no tagged block exists.
The code tool, code scoring and conversion all read ``<code>`` payloads through it.
"""

from __future__ import annotations

import dataclasses
import re

PY_OPEN = "```py\n"
SH_OPEN = "```sh\n"
FENCE = "```"

_ANSWER_TAG = "<answer>"
_CODE_TAG = re.compile(r"<code>(.*?)(?:</code>|\Z)", re.DOTALL)
_PY_BLOCK = re.compile(r"```(?:py|python|python3)[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL)
_SH_BLOCK = re.compile(r"```(?:sh|bash)[ \t]*\n(.*?)```", re.DOTALL)
_BARE_BLOCK = re.compile(r"```[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL)

_CANONICAL = re.compile(
    r"\A```py\n(?P<code>(?:(?!```).)*?)\n```(?:\n```sh\n(?P<stdin>(?:(?!```).)*?)```)?\Z", re.DOTALL
)


def render_code(code: str, stdin: str | None = None) -> str:
    """The canonical ``<code>`` content for ``code`` (and ``stdin``, when the program reads any).

    Surrounding blank lines of ``code`` are dropped (they do not change what runs); ``stdin`` is
    kept byte for byte, with a final newline added when it has none (so the closing fence sits on
    its own line). Raises ``ValueError`` when either holds a ```` ``` ```` (it would close the fence).
    """
    body = code.strip("\n")
    if FENCE in body or (stdin is not None and FENCE in stdin):
        raise ValueError("code or stdin holding ``` cannot be fenced")
    if not body.strip():
        raise ValueError("empty code")
    text = f"{PY_OPEN}{body}\n{FENCE}"
    if stdin:
        text += f"\n{SH_OPEN}{stdin if stdin.endswith(chr(10)) else stdin + chr(10)}{FENCE}"
    return text


def code_format_error(content: str) -> str | None:
    """``None`` when ``content`` is the canonical ``<code>`` content, else what is wrong with it."""
    m = _CANONICAL.match(content)
    if m is None:
        if "```python" in content:
            return "fence the code with ```py, not ```python"
        if not content.startswith(PY_OPEN):
            return "the code must be one ```py block (then an optional ```sh stdin block), nothing else"
        return "after the ```py block only one ```sh stdin block may follow, fenced on its own lines"
    if not m.group("code").strip():
        return "the ```py block is empty"
    stdin = m.group("stdin")
    if stdin and not stdin.endswith("\n"):
        return "the ```sh block must end with a newline before its closing fence"
    return None


@dataclasses.dataclass(frozen=True)
class ExtractedCode:
    """Python source and the stdin found in a payload."""

    code: str
    stdin: str = ""


def extract_code(payload: str) -> ExtractedCode | None:
    """The Python code (and stdin) in a ``<code>`` payload; ``None`` when there is none."""
    text = payload
    if _ANSWER_TAG in text:
        text = text.split(_ANSWER_TAG)[-1]
    m = _CODE_TAG.search(text)
    if m:
        text = m.group(1)
    stdin = "\n".join(_SH_BLOCK.findall(text))
    blocks = _PY_BLOCK.findall(text) or _BARE_BLOCK.findall(text)
    if blocks:
        return ExtractedCode("\n\n".join(blocks), stdin)
    stripped = text.strip()
    if stripped and "```" not in stripped and _compiles(stripped):
        return ExtractedCode(stripped, stdin)
    return None


def _compiles(source: str) -> bool:
    try:
        compile(source, "<payload>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True
