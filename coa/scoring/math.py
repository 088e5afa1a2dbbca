r"""Math answer scoring: ``\boxed{}`` extraction and equivalence through ``math-verify``.

``math_equal(pred, gold)`` decides whether a model's math answer equals a gold answer:

1. The prediction's expression is the content of its *last* ``\boxed{...}`` / ``\fbox{...}``
   (``extract_boxed``); without one, the whole answer with any ``$...$``, ``\(...\)``, ``\[...\]``
   delimiters removed. Golds get the same treatment (OlympiadBench golds carry ``$``).
2. Identical strings (ignoring whitespace) are equal at once, without sympy.
3. Both sides are wrapped as ``$\boxed{...}$`` and parsed with ``math_verify.parse``; then
   ``math_verify.verify(gold, pred)`` (order matters there: gold first). This handles fractions vs
   decimals, ``\left( 3, \frac{\pi}{2} \right)`` vs ``(3, \pi/2)``, ``27.0`` vs ``27``, sets,
   intervals, equations such as ``x=5`` vs ``5``, ``\text{...}``, degrees, base subscripts, etc.
   For a prediction without ``\boxed`` whose wrapped form does not verify, the raw text is also
   parsed the way AFM does (math-verify's own extraction, e.g. "The answer is 5").
4. Numeric tolerance: math-verify rounds floats to ``float_rounding`` (6) decimal places, but with
   sympy >= 1.13 a ``Float`` never equals an ``Integer``, so ``1.0000001`` would not match ``1``.
   As a fallback, two constant real expressions at least one of which contains a decimal are equal
   when they differ by less than half a unit in the ``float_rounding``-th decimal place.

Timeouts. sympy can take unbounded time on a pathological answer (``10^{10^{10}}``,
``1000000!``). Every call has a wall-clock budget (``timeout_s``, default 5 s) and a timed-out
comparison is "not equal" (reason ``"timeout"``). math-verify's own timeouts use ``signal.alarm``,
which works only in the main thread (it raises ``ValueError`` elsewhere) and whose per-step budgets
add up; so they are switched off and this module enforces one budget per call itself:

* in the main thread, with a ``SIGALRM`` interval timer around the whole computation (any timer
  and handler the caller had are restored afterwards);
* in any other thread (Prefect's default task runner, a ``ThreadPoolExecutor``), by sending the
  comparison to a small pool of long-lived worker processes (``python -m
  coa.scoring._mathworker_main``) that run it in *their* main thread under the same timer, and killing
  a worker that does not answer within the budget plus a grace period (this also covers C code
  that a signal cannot interrupt). ``isolation="process"`` forces this path from the main thread.

:func:`check_math` rejects answers over ``MAX_EXPRESSION_CHARS`` unparsed (``"too_long"``); AFM's doesn't.
"""

from __future__ import annotations

import functools
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, TypeVar

DEFAULT_TIMEOUT_S = 5.0
"""Wall-clock budget for one ``math_equal``/``check_math`` call."""
DEFAULT_FLOAT_ROUNDING = 6
"""Decimal places to which decimals are compared (math-verify's default)."""
MAX_EXPRESSION_CHARS = 2000
"""Longer extracted answers (or golds) are not parsed at all."""

Isolation = Literal["auto", "process"]

MathReason = Literal[
    "string",  # identical strings
    "math_verify",  # math_verify.verify said equal
    "numeric",  # the numeric-tolerance fallback said equal
    "not_equal",
    "empty",  # no answer expression (also: the last box is never closed)
    "too_long",
    "unparsable",  # neither side parsed to anything comparable
    "timeout",
    "error",  # an unexpected exception inside sympy/math-verify (logged)
]

_T = TypeVar("_T")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MathVerdict:
    """The outcome of comparing one prediction with a list of golds."""

    equal: bool
    reason: MathReason
    gold: str | None = None
    """The gold that matched (when ``equal``)."""


# --------------------------------------------------------------------------------------------
# Extraction

_BOX_START = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def _group_end(text: str, open_index: int) -> int | None:
    """Index just past the ``}`` closing the group opened at ``text[open_index] == '{'``."""
    depth = 0
    i = open_index
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped character (\{, \}, \\) never opens or closes a group
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _boxes(text: str) -> list[tuple[str | None, int]]:
    """Top-level boxes in order: (content or None if unterminated, end index)."""
    found: list[tuple[str | None, int]] = []
    pos = 0
    while (m := _BOX_START.search(text, pos)) is not None:
        i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            end = _group_end(text, i)
            if end is None:
                found.append((None, len(text)))
                break
            found.append((text[i + 1 : end - 1], end))
            pos = end
        elif i > m.end():
            # "\boxed 5": the argument runs to the next whitespace or "$".
            arg = re.match(r"[^\s$]+", text[i:])
            content = arg.group(0) if arg else ""
            found.append((content, i + len(content)))
            pos = i + len(content)
        else:
            pos = m.end()
    return found


def extract_boxed(text: str) -> str | None:
    r"""The content of the last top-level ``\boxed{...}`` (or ``\fbox{...}``) in ``text``.

    Braces nest (``\boxed{\frac{1}{2}}`` gives ``\frac{1}{2}``), escaped braces ``\{ \}`` do not
    count, ``\boxed{\boxed{x}}`` gives ``x`` and the space form ``\boxed 5`` gives ``5``. Returns
    ``None`` when there is no box, or when the last box is never closed (a truncated answer scores
    nothing rather than falling back to an earlier, abandoned box).
    """
    boxes = _boxes(text)
    if not boxes:
        return None
    content = boxes[-1][0]
    while content is not None:
        stripped = content.strip()
        inner = _boxes(stripped)
        whole = len(inner) == 1 and inner[0][1] == len(stripped) and _BOX_START.match(stripped)
        if not whole:
            break
        content = inner[0][0]
    return content.strip() if content is not None else None


_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def _strip_delimiters(text: str) -> str:
    text = text.strip()
    changed = True
    while changed:
        changed = False
        for left, right in _DELIMITERS:
            if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
                inner = text[len(left) : len(text) - len(right)]
                if not inner.endswith("\\") and not _UNESCAPED_DOLLAR.search(inner):
                    text = inner.strip()
                    changed = True
                    break
    return text


def answer_expression(text: str) -> tuple[str, bool]:
    """The expression to compare and whether it came from a box.

    A text whose last box is unterminated (a truncated generation) has no expression.
    """
    boxed = extract_boxed(text)
    if boxed is not None:
        return _strip_delimiters(boxed), True
    if _BOX_START.search(text):  # boxes, but the last one is never closed
        return "", True
    return _strip_delimiters(text), False


# --------------------------------------------------------------------------------------------
# Comparison (no timeout here; see _run_with_deadline)


class _TimeoutWarningFilter(logging.Filter):
    """Drops math-verify's warning that its own (signal-based) timeout is disabled: we have ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


_MV_LOGGERS_FILTERED = False


def _math_verify() -> Any:
    global _MV_LOGGERS_FILTERED
    import math_verify

    if not _MV_LOGGERS_FILTERED:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_TimeoutWarningFilter())
        _MV_LOGGERS_FILTERED = True
    return math_verify


def warm_up() -> None:
    """Import math-verify and sympy now (about a second) rather than on the first comparison."""
    _parse_wrapped("1")


def _squash(text: str) -> str:
    return "".join(text.split())


def _parse(expr: str) -> tuple[Any, ...]:
    mv = _math_verify()
    return tuple(mv.parse(expr, parsing_timeout=None))


@lru_cache(maxsize=4096)
def _parse_wrapped(expr: str) -> tuple[Any, ...]:
    if _UNESCAPED_DOLLAR.search(expr):
        # Several inline formulas ("$x$ and $y$") cannot be boxed as one: let math-verify find them.
        return _parse(expr)
    return _parse("$\\boxed{" + expr + "}$")


def _sympy_items(parsed: Sequence[Any]) -> list[Any]:
    from sympy import Basic
    from sympy.matrices import MatrixBase

    return [p for p in parsed if isinstance(p, Basic | MatrixBase)]


def _numeric_close(gold: Any, pred: Any, float_rounding: int) -> bool:
    from sympy import Expr, Float, Rational

    if not (isinstance(gold, Expr) and isinstance(pred, Expr)):
        return False
    if gold.free_symbols or pred.free_symbols or not (gold.has(Float) or pred.has(Float)):
        return False
    diff = (gold - pred).evalf(30)
    if not (diff.is_number and diff.is_real and diff.is_finite):
        return False
    return bool(abs(diff) < Rational(1, 2) * Rational(10) ** (-float_rounding))


def _compare_parsed(gold: Sequence[Any], pred: Sequence[Any], float_rounding: int) -> MathReason | None:
    mv = _math_verify()
    if not pred or not gold:
        return None
    if mv.verify(list(gold), list(pred), float_rounding=float_rounding, timeout_seconds=None):
        return "math_verify"
    for g in _sympy_items(gold):
        for p in _sympy_items(pred):
            try:
                close = _numeric_close(g, p, float_rounding)
            except Exception:  # sympy may refuse some comparisons; that is "not close"
                close = False
            if close:
                return "numeric"
    return None


def _check_unguarded(
    pred_expr: str, pred_raw: str, boxed: bool, gold_exprs: Sequence[str], float_rounding: int
) -> tuple[MathReason, int | None]:
    """The comparison proper; returns (reason, index of the matching gold)."""
    pred_parsed = _parse_wrapped(pred_expr)
    raw_parsed: tuple[Any, ...] | None = None
    anything_parsed = bool(_sympy_items(pred_parsed))
    for index, gold_expr in enumerate(gold_exprs):
        gold_parsed = _parse_wrapped(gold_expr)
        if not _sympy_items(gold_parsed):
            continue
        reason = _compare_parsed(gold_parsed, pred_parsed, float_rounding)
        if reason is None and not boxed:
            if raw_parsed is None:
                raw_parsed = _parse(pred_raw)
                anything_parsed = anything_parsed or bool(_sympy_items(raw_parsed))
            reason = _compare_parsed(gold_parsed, raw_parsed, float_rounding)
        if reason is not None:
            return reason, index
    return ("not_equal" if anything_parsed else "unparsable"), None


# --------------------------------------------------------------------------------------------
# Deadlines


class _DeadlineExceeded(BaseException):
    """Raised by our SIGALRM handler; a BaseException so that math-verify's and sympy's
    ``except Exception`` blocks do not swallow it."""


_TIMED_OUT = object()


def _can_use_signals() -> bool:
    return threading.current_thread() is threading.main_thread()


def _run_with_deadline(fn: Callable[[], _T], timeout_s: float) -> _T | object:
    """Run ``fn`` in the main thread with a SIGALRM deadline; ``_TIMED_OUT`` if it ran out.

    The timer repeats every 50 ms after the deadline, so code that swallows one interruption is
    interrupted again. The caller's SIGALRM handler and any pending timer are restored.
    """
    armed = True

    def on_alarm(signum: int, frame: object) -> None:
        if armed:
            raise _DeadlineExceeded

    start = time.monotonic()
    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 1e-3), 0.05)
    try:
        try:
            return fn()
        finally:
            armed = False
    except _DeadlineExceeded:
        return _TIMED_OUT
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            remaining = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, remaining, old_interval)


def check_prepared(
    pred_expr: str,
    pred_raw: str,
    boxed: bool,
    gold_exprs: Sequence[str],
    *,
    timeout_s: float,
    float_rounding: int,
) -> tuple[MathReason, int | None]:
    """Compare already-extracted expressions in this (main) thread under a deadline.

    Used by ``check_math`` and by the worker process; not meant to be called directly.
    """
    _math_verify()  # a missing dependency must fail loudly, not score every answer as an "error"
    try:
        outcome = _run_with_deadline(
            lambda: _check_unguarded(pred_expr, pred_raw, boxed, gold_exprs, float_rounding), timeout_s
        )
    except Exception:
        logger.warning("math comparison failed for %.200r", pred_expr, exc_info=True)
        return "error", None
    if outcome is _TIMED_OUT:
        return "timeout", None
    assert isinstance(outcome, tuple)
    return outcome


# --------------------------------------------------------------------------------------------
# Public API


def _as_list(gold_answers: str | Iterable[str]) -> list[str]:
    return [gold_answers] if isinstance(gold_answers, str) else list(gold_answers)


def check_math(
    prediction: str,
    gold_answers: str | Iterable[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    float_rounding: int = DEFAULT_FLOAT_ROUNDING,
    isolation: Isolation = "auto",
) -> MathVerdict:
    """Compare a math answer with one or more golds; see the module docstring for the rules.

    Never raises for a bad or slow answer: those are ``equal=False`` with a ``reason``. Safe to
    call from any thread (see "Timeouts" above).
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    golds = _as_list(gold_answers)
    pred_expr, boxed = answer_expression(prediction)
    if not pred_expr:
        return MathVerdict(False, "empty")
    gold_exprs = [answer_expression(g)[0] for g in golds]
    for gold, gold_expr in zip(golds, gold_exprs, strict=True):
        if gold_expr and _squash(gold_expr) == _squash(pred_expr):
            return MathVerdict(True, "string", gold)
    if len(pred_expr) > MAX_EXPRESSION_CHARS:
        return MathVerdict(False, "too_long")
    usable = [(g, e) for g, e in zip(golds, gold_exprs, strict=True) if e and len(e) <= MAX_EXPRESSION_CHARS]
    if not usable:
        return MathVerdict(False, "unparsable")
    exprs = [e for _, e in usable]
    pred_raw = prediction if len(prediction) <= MAX_EXPRESSION_CHARS else pred_expr
    if isolation == "auto" and _can_use_signals():
        reason, index = check_prepared(
            pred_expr, pred_raw, boxed, exprs, timeout_s=timeout_s, float_rounding=float_rounding
        )
    else:
        from coa.scoring import _mathworker

        reason, index = _mathworker.check_in_worker(
            pred_expr, pred_raw, boxed, exprs, timeout_s=timeout_s, float_rounding=float_rounding
        )
    return MathVerdict(index is not None, reason, usable[index][0] if index is not None else None)


def math_equal(
    pred: str,
    gold: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    float_rounding: int = DEFAULT_FLOAT_ROUNDING,
) -> bool:
    r"""Whether the math answer ``pred`` (boxed or not) is equivalent to ``gold``.

    >>> math_equal(r"so \boxed{(3, \pi/2)}", r"\left( 3, \frac{\pi}{2} \right)")
    True
    """
    return check_math(pred, gold, timeout_s=timeout_s, float_rounding=float_rounding).equal


# --------------------------------------------------------------------------------------------
# AFM's rule (the published numbers of AIME / AMC / MATH-500 / OlympiadBench)


AFM_STEP_TIMEOUT_S = 5.0
"""AFM's ``parse(answer, parsing_timeout=5)``, ``verify(..., timeout_seconds=5)``, gold parse 5."""


def afm_budget_s(golds: int, step_s: float = AFM_STEP_TIMEOUT_S) -> float:
    """The most one :func:`afm_math_verify` call takes: 1 + 2 per gold parse/verify steps."""
    return step_s * (1 + 2 * golds)


def afm_check_prepared(answer: str, golds: Sequence[str], *, timeout_s: float) -> tuple[bool, str]:
    """:func:`afm_math_verify` in this (main) thread (also the worker's entry); ``timeout_s`` is the
    limit of each parse and each verify, as AFM sets math-verify's own (its ``signal.alarm``
    timeouts work in the main thread only, so each step runs under this module's deadline)."""
    mv = _math_verify()
    timed_out = False
    try:
        parsed = _run_with_deadline(lambda: list(mv.parse(answer, parsing_timeout=None)), timeout_s)
        if not isinstance(parsed, list) or len(parsed) < 2:  # math-verify's parse gives [] on timeout
            return False, "timeout" if parsed is _TIMED_OUT else "unparsable"
        if str(parsed[1]) in golds:
            return True, "string"
        for gold in golds:
            target = _run_with_deadline(
                functools.partial(mv.parse, "\\boxed{" + gold + "}", parsing_timeout=None), timeout_s
            )
            if target is _TIMED_OUT:
                timed_out = True
                continue
            equal = _run_with_deadline(
                functools.partial(mv.verify, target, parsed, timeout_seconds=None), timeout_s
            )
            if equal is _TIMED_OUT:  # math-verify's verify returns False on its timeout
                timed_out = True
            elif equal:
                return True, "math_verify"
    except Exception:
        logger.warning("AFM math check failed for %.200r", answer, exc_info=True)
        return False, "error"
    return False, "timeout" if timed_out else "not_equal"


def afm_math_verify(
    answer: str, gold_answers: str | Iterable[str], *, timeout_s: float = AFM_STEP_TIMEOUT_S
) -> tuple[bool, str]:
    r"""``(equal, reason)`` of an ``<answer>`` content under AFM's math rule (its ``mathverify``).

    ``math_verify.parse`` of the raw answer must give at least two items (an expression and its
    text); the answer is right when that text is one of the golds, or when ``math_verify.verify``
    finds the gold, parsed as ``\boxed{gold}``, equal to it. No ``\boxed`` extraction of its own, no
    numeric tolerance beyond math-verify's (unlike :func:`check_math`), and no length limit: a
    whole long response is parsed, and math-verify finds the ``\boxed{}`` at its end, as AFM's
    reward does. ``timeout_s`` limits each parse and each verify (AFM: 5 s each). Thread-safe."""
    golds = _as_list(gold_answers)
    if not answer.strip() or not golds:
        return False, "empty"
    if _can_use_signals():
        return afm_check_prepared(answer, golds, timeout_s=timeout_s)
    from coa.scoring import _mathworker

    return _mathworker.afm_in_worker(
        answer, golds, timeout_s=timeout_s, budget_s=afm_budget_s(len(golds), timeout_s)
    )
