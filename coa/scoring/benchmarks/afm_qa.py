"""AFM's exact match for multi-hop QA (NQ, HotpotQA, …) as its ``mhqa_eval`` reward computes it.

The published MHQA numbers come from AFM's validation reward: the answer is split on ``|``, each part
normalised the SQuAD way (lower-case, ASCII punctuation removed, the articles a/an/the removed,
whitespace collapsed), parts that normalise to nothing dropped, and the **first** remaining part must
equal a normalised gold. No Unicode normalisation: a curly quote or a full-width letter stays as it
is (unlike :func:`coa.scoring.qa.normalize_answer`, the project's rule, which folds them), so this
module, not :mod:`coa.scoring.qa`, reproduces the published figures.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def squad_normalize(text: str) -> str:
    """SQuAD's normalisation, in its order: lower, punctuation, articles, whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def mhqa_eval_match(prediction: str, golds: Sequence[str]) -> tuple[bool, str]:
    """``(correct, detail)`` of an answer under AFM's ``mhqa_eval`` rule (first ``|`` part)."""
    parts = [p for p in (squad_normalize(x) for x in prediction.split("|")) if p]
    if not parts:
        return False, "no answer part"
    gold_set = {squad_normalize(g) for g in golds}
    return parts[0] in gold_set, f"first of {len(parts)} part(s): {parts[0][:80]!r}"
