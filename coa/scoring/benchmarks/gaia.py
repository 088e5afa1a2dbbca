"""GAIA's question scorer, written from the benchmark's public description of its rule.

GAIA asks for one short answer: a number, a string, or a comma/semicolon separated list of those.
The gold answer decides which comparison applies:

* **number** (the gold parses as a float): the prediction with every ``$``, ``%`` and ``,``
  removed (and surrounding whitespace) must parse as a float equal to the gold's float. So
  ``2.00`` and ``$2`` are ``2``, ``16,000`` and ``16000.0`` are ``16000``; ``the 519`` and
  ``519 m`` are not numbers and are wrong.
* **list** (the gold holds a ``,`` or ``;``): gold and prediction are split on ``,`` and ``;``;
  the two lists must have the same length, and each element is compared in order: a number
  element as above, any other element as a string with its whitespace removed and lower-cased
  (punctuation kept). ``Indonesia;Myanmar`` matches ``Indonesia, Myanmar``;
  ``Braintree and Honolulu`` (one element) does not match ``Braintree, Honolulu`` (two).
* **string** (anything else): both sides with all whitespace and ASCII punctuation removed,
  lower-cased, must be equal. ``the castle`` matches ``THE CASTLE`` and ``Right.`` matches
  ``Right``, but ``the 519``-style additions (an article, a unit, an explanation) are wrong.

No Unicode normalisation happens (GAIA does none): a full-width digit or a decomposed accent is a
different character. An empty or missing prediction is wrong. Several golds (``task.v1`` allows a
list): any one matching is enough (GAIA has one).

:func:`gaia_verdict` says which branch decided, so the conformance cases can name the rule.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Literal

GaiaRule = Literal["number", "list", "list_length", "string", "empty"]

_PUNCT = str.maketrans("", "", string.punctuation)
_SPACE = re.compile(r"\s")
_LIST_SPLIT = re.compile(r"[,;]")


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _number(prediction: str) -> float | None:
    """The prediction as GAIA reads a number: ``$``, ``%`` and ``,`` removed, then a float."""
    for ch in "$%,":
        prediction = prediction.replace(ch, "")
    return _as_float(prediction.strip())


def _squash(text: str, *, punctuation: bool) -> str:
    text = _SPACE.sub("", text)
    if punctuation:
        text = text.translate(_PUNCT)
    return text.lower()


def _element_equal(prediction: str, gold: str) -> bool:
    gold_number = _as_float(gold)
    if gold_number is not None:
        return _number(prediction) == gold_number
    return _squash(prediction, punctuation=False) == _squash(gold, punctuation=False)


def gaia_verdict(prediction: str | None, gold: str) -> tuple[bool, GaiaRule]:
    """``(correct, rule)`` of one prediction against one gold under GAIA's rule."""
    if prediction is None or not prediction.strip():
        return False, "empty"
    gold_number = _as_float(gold)
    if gold_number is not None:
        return _number(prediction) == gold_number, "number"
    if _LIST_SPLIT.search(gold):
        golds = _LIST_SPLIT.split(gold)
        parts = _LIST_SPLIT.split(prediction)
        if len(parts) != len(golds):
            return False, "list_length"
        return all(_element_equal(p, g) for p, g in zip(parts, golds, strict=True)), "list"
    return _squash(prediction, punctuation=True) == _squash(gold, punctuation=True), "string"


def gaia_match(prediction: str | None, golds: Sequence[str]) -> tuple[bool, GaiaRule, str | None]:
    """``(correct, rule, matched gold)`` against several golds (any one)."""
    rule: GaiaRule = "empty"
    for gold in golds:
        correct, rule = gaia_verdict(prediction, gold)
        if correct:
            return True, rule, gold
    return False, rule, None
