"""Decontamination of trajectories against benchmark task sets (any ``task.v1`` table).

An index is built once from the benchmark tables (benchmark name -> table with ``task_id``,
``question``, ``gold_answers``):

* the word n-grams of every normalized benchmark question (n = ``ngram_size``) and the normalized
  questions themselves;
* the normalized gold answers of every item;
* for the observation scan, every normalized answer of at least ``min_answer_chars`` characters.

A run is flagged, with the benchmark and the item it matched, when

1. ``contaminated_question``: its normalized question equals a benchmark question, or the share of
   the shorter question's n-grams found in one benchmark question is at least
   ``question_threshold`` (questions shorter than n words can only match exactly);
2. ``contaminated_answer``: one of its normalized gold answers equals an answer of a benchmark item
   whose question shares at least ``answer_overlap_threshold`` of its ``answer_ngram_size``-grams;
3. ``contaminated_observation``: a tool observation contains a benchmark answer of at least
   ``min_answer_chars`` characters as a whole-word sequence (one Aho-Corasick pass per batch with
   Polars ``str.extract_many``) and, unless ``observation_question_overlap`` is 0, also that share
   of the item's question n-grams: a page carrying the benchmark item, not any page that mentions
   a common answer such as "research" or "diamond".

The index depends only on the benchmarks, never on the trajectories, so it does not grow with the
input.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from coa.curate.config import DecontamConfig
from coa.curate.filters import Rejection
from coa.curate.frames import step_frame
from coa.curate.text import normalize_expr, normalize_many, word_ngrams
from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

BENCHMARK_COLUMNS = ("task_id", "question", "gold_answers")


def load_benchmarks(uris: Sequence[str]) -> dict[str, pa.Table]:
    """Read the benchmark ``task.v1`` artifacts (only the columns decontamination needs).

    Each is named by its artifact name; a repeated name gets a ``#2``, ``#3``… suffix.
    """
    from coa import io

    out: dict[str, pa.Table] = {}
    for uri in uris:
        ref = io.open_artifact(uri)
        name = ref.name
        k = 2
        while name in out:
            name, k = f"{ref.name}#{k}", k + 1
        out[name] = io.read_table(ref, columns=list(BENCHMARK_COLUMNS))
    return out


def _fmt_item(benchmark: str, task_id: str) -> str:
    return f"benchmark {benchmark!r} item {task_id!r}"


class BenchmarkIndex:
    """Question n-grams, questions and answers of the benchmark items; see the module docstring."""

    def __init__(self, cfg: DecontamConfig, benchmarks: Mapping[str, pa.Table]) -> None:
        self.cfg = cfg
        self.items: list[tuple[str, str]] = []
        self._questions: list[str] = []
        self._answers: list[frozenset[str]] = []
        self._grams: dict[int, list[int]] = defaultdict(list)
        self._gram_counts: list[int] = []
        self._exact: dict[str, list[int]] = defaultdict(list)
        self._by_answer: dict[str, list[int]] = defaultdict(list)
        self._partial: dict[int, set[str]] = {}
        self.patterns: dict[str, list[int]] = defaultdict(list)
        for name in sorted(benchmarks):
            self._add(name, benchmarks[name])
        self._pattern_list = sorted(self.patterns)

    def _add(self, name: str, table: pa.Table) -> None:
        missing = [c for c in BENCHMARK_COLUMNS if c not in table.column_names]
        if missing:
            raise ValueError(
                f"benchmark {name!r} lacks column(s) {', '.join(missing)} (need a task.v1 table)"
            )
        ids = [str(v) for v in table.column("task_id").to_pylist()]
        questions = normalize_many(table.column("question").to_pylist())
        golds = table.column("gold_answers").to_pylist()
        flat_golds = normalize_many([g for gs in golds for g in (gs or [])])
        pos = 0
        for task_id, question, gs in zip(ids, questions, golds, strict=True):
            n_golds = len(gs or [])
            answers = frozenset(a for a in flat_golds[pos : pos + n_golds] if a)
            pos += n_golds
            item = len(self.items)
            self.items.append((name, task_id))
            self._questions.append(question)
            self._answers.append(answers)
            grams = word_ngrams(question.split(), self.cfg.ngram_size)
            self._gram_counts.append(len(grams))
            for g in grams:
                self._grams[hash(g)].append(item)
            if question:
                self._exact[question].append(item)
            for a in answers:
                self._by_answer[a].append(item)
                if len(a) >= self.cfg.min_answer_chars:
                    self.patterns[f" {a} "].append(item)

    def __len__(self) -> int:
        return len(self.items)

    # -- questions and answers ---------------------------------------------------------------
    def question_match(self, question: str) -> tuple[int, float] | None:
        """The benchmark item a normalized question overlaps most (item, overlap ratio), if flagged."""
        exact = self._exact.get(question)
        if exact:
            return exact[0], 1.0
        grams = word_ngrams(question.split(), self.cfg.ngram_size)
        if not grams:
            return None
        hits: Counter[int] = Counter()
        for g in grams:
            for item in set(self._grams.get(hash(g), ())):
                hits[item] += 1
        best: tuple[int, float] | None = None
        for item, n in sorted(hits.items()):
            ratio = n / min(len(grams), self._gram_counts[item])
            if ratio >= self.cfg.question_threshold and (best is None or ratio > best[1]):
                best = (item, ratio)
        return best

    def _partial_grams(self, item: int) -> set[str]:
        grams = self._partial.get(item)
        if grams is None:
            grams = word_ngrams(self._questions[item].split(), self.cfg.answer_ngram_size)
            self._partial[item] = grams
        return grams

    def answer_match(self, question: str, answers: Sequence[str]) -> tuple[int, str, float] | None:
        """A benchmark item with one of ``answers`` whose question partially overlaps ``question``."""
        mine = word_ngrams(question.split(), self.cfg.answer_ngram_size)
        if not mine:
            return None
        best: tuple[int, str, float] | None = None
        for a in sorted(set(answers)):
            for item in self._by_answer.get(a, ()):
                theirs = self._partial_grams(item)
                if not theirs:
                    continue
                ratio = len(mine & theirs) / min(len(mine), len(theirs))
                if ratio >= self.cfg.answer_overlap_threshold and (best is None or ratio > best[2]):
                    best = (item, a, ratio)
        return best

    # -- the batch check ---------------------------------------------------------------------
    def check(self, table: pa.Table, normalized_questions: Sequence[str]) -> list[Rejection | None]:
        """Flag contaminated runs of ``table`` (one entry per run)."""
        n = table.num_rows
        out: list[Rejection | None] = [None] * n
        if not self.items or n == 0:
            return out
        own = self._own_answers(table)
        for i, question in enumerate(normalized_questions):
            q = self.question_match(question)
            if q is not None:
                item, ratio = q
                how = (
                    "equals"
                    if ratio == 1.0 and question == self._questions[item]
                    else (f"shares {ratio:.0%} of its word {self.cfg.ngram_size}-grams with")
                )
                out[i] = Rejection("contaminated_question", f"question {how} {_fmt_item(*self.items[item])}")
                continue
            a = self.answer_match(question, sorted(own[i]))
            if a is not None:
                item, answer, ratio = a
                out[i] = Rejection(
                    "contaminated_answer",
                    f"gold answer {answer!r} equals the answer of {_fmt_item(*self.items[item])}, whose "
                    f"question shares {ratio:.0%} of its word {self.cfg.answer_ngram_size}-grams",
                )
        if self.cfg.scan_observations and self._pattern_list:
            todo = [i for i in range(n) if out[i] is None]
            for i, rejection in self._scan_observations(table, todo, own).items():
                out[i] = rejection
        return out

    def _own_answers(self, table: pa.Table) -> list[set[str]]:
        golds = table.column("gold_answers").to_pylist()
        flat = normalize_many([g for gs in golds for g in (gs or [])])
        own: list[set[str]] = []
        pos = 0
        for gs in golds:
            k = len(gs or [])
            own.append({a for a in flat[pos : pos + k] if a})
            pos += k
        return own

    def _scan_observations(
        self, table: pa.Table, rows: Sequence[int], own: Sequence[set[str]]
    ) -> dict[int, Rejection]:
        if not rows:
            return {}
        sub = table.take(pa.array(rows, pa.int64()))
        steps = step_frame(sub, ("index", "observation")).filter(pl.col("observation").is_not_null())
        if steps.is_empty():
            return {}
        hits = (
            steps.with_columns(text=pl.lit(" ") + normalize_expr(pl.col("observation")) + pl.lit(" "))
            .with_columns(found=pl.col("text").str.extract_many(self._pattern_list, overlapping=True))
            .filter(pl.col("found").list.len() > 0)
            .select("row", "index", "text", pl.col("found").list.unique(maintain_order=True))
        )
        need = self.cfg.observation_question_overlap
        out: dict[int, Rejection] = {}
        for local_row, step_index, text, found in hits.iter_rows():
            row = rows[local_row]
            if row in out:
                continue
            for pattern in found:
                answer = pattern.strip()
                if self.cfg.skip_own_answers and answer in own[row]:
                    continue
                for item in self.patterns[pattern]:
                    overlap = 1.0
                    if need > 0:
                        # ``text`` is normalized (words joined by single spaces) and padded with a
                        # space each side, so an n-gram occurs as words iff " gram " is a substring
                        theirs = self._partial_grams(item)
                        shared = sum(1 for gram in theirs if f" {gram} " in text)
                        overlap = shared / len(theirs) if theirs else 0.0
                        if overlap < need:
                            continue
                    with_question = f", with {overlap:.0%} of its question's word n-grams" if need > 0 else ""
                    out[row] = Rejection(
                        "contaminated_observation",
                        f"observation of step {step_index} contains the answer {answer!r} of "
                        f"{_fmt_item(*self.items[item])}{with_question}",
                    )
                    break
                if row in out:
                    break
        return out

    def approx_bytes(self) -> int:
        """Rough size of the index in bytes (independent of the trajectories)."""
        size = sys.getsizeof(self._grams) + sum(88 + 8 * len(v) for v in self._grams.values())
        size += sum(sys.getsizeof(q) for q in self._questions)
        size += sum(sys.getsizeof(p) + 64 for p in self.patterns)
        size += sum(sum(sys.getsizeof(g) for g in s) for s in self._partial.values())
        return size
