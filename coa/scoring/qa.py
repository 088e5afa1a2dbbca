"""Short-answer QA scoring: answer normalisation, exact match and token F1.

This is the SQuAD/AFM recipe (``normalize_answer`` = lowercase, strip punctuation, drop the articles
"a", "an", "the", collapse whitespace) with four deliberate, documented choices:

* **Unicode.** Text is NFKC-normalised and case-folded, so composed and decomposed forms
  ("Röntgen" as ``o`` + U+0308 or as U+00F6), full-width letters and ``ß``/``ss`` compare equal.
  Punctuation is every Unicode ``P*`` character plus ASCII ``string.punctuation`` (which also
  holds the ASCII symbols ``$+<=>^`|~``), so "“Röntgen”" and "Röntgen." normalise alike. Accents
  are *kept*: "Rontgen" does not match "Röntgen" (neither does it in AFM or SQuAD).
* **Multiple answers.** An MHQA prediction may list several answers separated by ``|``. Parts are
  normalised and parts that normalise to nothing are dropped (AFM does the same). The mode says
  how parts are combined:

  - ``"all"``: every part must match some gold (AFM's *train* reward, ``mhqa_train.py``);
  - ``"first"``: only the first non-empty part counts (AFM's *val* metric, ``mhqa_eval.py``);
  - ``"none"``: no splitting; the whole prediction is one answer (for open-ended answers, where a
    ``|`` is ordinary text).

  ``"all"`` is the default because it is what the model is trained on and because it cannot be
  gamed by a wrong second part; pass ``"first"`` to reproduce AFM's published MHQA numbers.
  Token F1 uses the same parts: the mean over parts of each part's best F1 against any gold
  (``"all"``), the first part's best F1 (``"first"``) or the whole string's (``"none"``).
* **Empty answers never match.** A prediction that normalises to nothing scores EM 0 and F1 0
  (SQuAD would give an empty prediction full marks against an empty gold).
* **Golds that are only an article.** A gold such as "A" (a choice letter, a band called "The")
  normalises to nothing; for such a gold only, the comparison keeps the articles, so "A" matches
  "a" but not "" or "the". Golds with no content at all are ignored.

Consequently ``exact_match(p, g, mode=m)`` implies ``token_f1(p, g, mode=m) == 1.0``.
All functions are pure.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Literal, get_args

MultiAnswerMode = Literal["all", "first", "none"]
"""How a ``|``-separated prediction is scored (see the module docstring)."""

MULTI_ANSWER_MODES: tuple[str, ...] = get_args(MultiAnswerMode)
ANSWER_SEPARATOR = "|"

_ASCII_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def _is_punctuation(ch: str) -> bool:
    return ch in _ASCII_PUNCTUATION or unicodedata.category(ch).startswith("P")


def _normalize(text: str, *, drop_articles: bool) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(ch for ch in text if not _is_punctuation(ch))
    # Deleting punctuation can leave a base letter next to a combining mark that was separated
    # from it; recompose so that normalising twice changes nothing.
    text = unicodedata.normalize("NFKC", text)
    if drop_articles:
        text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalize_answer(text: str) -> str:
    """Normalise a short answer: NFKC + casefold, drop punctuation and articles, collapse spaces.

    >>> normalize_answer("  The Wilhelm  Conrad Röntgen! ")
    'wilhelm conrad röntgen'
    """
    return _normalize(text, drop_articles=True)


class _Gold:
    """A gold answer in both normal forms; ``full`` may be empty when ``light`` is not."""

    __slots__ = ("full", "light")

    def __init__(self, text: str) -> None:
        self.full = normalize_answer(text)
        self.light = _normalize(text, drop_articles=False)

    def matches(self, part: str) -> bool:
        if self.full:
            return normalize_answer(part) == self.full
        return _normalize(part, drop_articles=False) == self.light

    def f1(self, part: str) -> float:
        if self.full:
            return _f1_tokens(normalize_answer(part).split(), self.full.split())
        return _f1_tokens(_normalize(part, drop_articles=False).split(), self.light.split())


def _golds(gold_answers: str | Iterable[str]) -> list[_Gold]:
    if isinstance(gold_answers, str):
        gold_answers = [gold_answers]
    golds = [_Gold(g) for g in gold_answers]
    return [g for g in golds if g.light]


def _f1_tokens(pred: Sequence[str], gold: Sequence[str]) -> float:
    if not pred or not gold:
        return 0.0
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(gold)
    return 2 * precision * recall / (precision + recall)


def _check_mode(mode: str) -> None:
    if mode not in MULTI_ANSWER_MODES:
        raise ValueError(f"unknown multi-answer mode {mode!r}; expected one of {MULTI_ANSWER_MODES}")


def split_answers(prediction: str, mode: MultiAnswerMode = "all") -> list[str]:
    """The parts of ``prediction`` that ``mode`` scores, raw (not normalised), empty parts dropped.

    ``"none"`` returns the whole prediction (if it has any content); ``"first"`` at most one part.
    """
    _check_mode(mode)
    raw = [prediction] if mode == "none" else prediction.split(ANSWER_SEPARATOR)
    parts = [p for p in raw if _normalize(p, drop_articles=False)]
    return parts[:1] if mode == "first" else parts


def exact_match(prediction: str, gold_answers: str | Iterable[str], *, mode: MultiAnswerMode = "all") -> bool:
    """Normalised exact match of ``prediction`` against any of ``gold_answers``.

    With ``mode="all"`` every ``|`` part must match some gold; ``"first"`` checks only the first
    part; ``"none"`` does not split. No parts, or no usable golds, means no match.
    """
    parts = split_answers(prediction, mode)
    golds = _golds(gold_answers)
    if not parts or not golds:
        return False
    return all(any(g.matches(part) for g in golds) for part in parts)


def token_f1(prediction: str, gold_answers: str | Iterable[str], *, mode: MultiAnswerMode = "all") -> float:
    """Bag-of-tokens F1 (SQuAD) of the prediction, maximised over golds, in ``[0, 1]``.

    Multi-part predictions score the mean over parts (``"all"``) or the first part (``"first"``).
    """
    parts = split_answers(prediction, mode)
    golds = _golds(gold_answers)
    if not parts or not golds:
        return 0.0
    best = [max(g.f1(part) for g in golds) for part in parts]
    return sum(best) / len(best)
