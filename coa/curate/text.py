"""Text normalisation and word n-grams shared by deduplication and decontamination.

One normal form is used everywhere so that a question, a gold answer and an observation compare
alike: Unicode NFKC, lower case, every character that is not a letter, digit or combining mark
turned into a space, whitespace collapsed. It is computed by Polars (vectorised over a column), and
:func:`normalize` runs the very same expression for single strings, so the two never disagree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")


_NOT_WORD = r"[^\p{L}\p{N}\p{M}\s]+"


def normalize_expr(expr: pl.Expr) -> pl.Expr:
    """The normal form of a string column (null stays null)."""
    return (
        expr.str.normalize("NFKC")
        .str.to_lowercase()
        .str.replace_all(_NOT_WORD, " ")
        .str.replace_all(r"\s+", " ")
        .str.strip_chars()
    )


def normalize_many(values: Sequence[str | None]) -> list[str]:
    """The normal form of each value (null becomes the empty string)."""
    if not values:
        return []
    series = pl.Series("v", list(values), dtype=pl.String)
    out = pl.DataFrame({"v": series}).select(normalize_expr(pl.col("v")).fill_null(""))
    return [str(v) for v in out.to_series().to_list()]


def normalize(text: str | None) -> str:
    """The normal form of one string."""
    return normalize_many([text])[0]


def word_ngrams(words: Sequence[str], n: int) -> set[str]:
    """The distinct word n-grams of ``words``, each joined by a space (empty if fewer words)."""
    if len(words) < n:
        return set()
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def shingles(text: str, n: int) -> set[str]:
    """Word shingles of a normalized text; a text shorter than ``n`` words is one shingle."""
    words = text.split()
    if not words:
        return set()
    return word_ngrams(words, n) or {" ".join(words)}


def stable_hash(parts: Iterable[str | None]) -> int:
    """A 64-bit hash of a sequence of strings, stable across processes (blake2b)."""
    h = hashlib.blake2b(digest_size=8)
    for p in parts:
        if p is None:
            h.update(b"\x00N")
        else:
            h.update(b"\x01")
            h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x1f")
    return int.from_bytes(h.digest(), "little")
