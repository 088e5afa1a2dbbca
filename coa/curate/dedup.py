"""Exact and near-duplicate removal of trajectories and tasks, streaming, first one kept.

Three rules, applied to runs in input order (only runs that passed every other check are seen):

* **exact duplicate**: the same normalized question and the same step content (agents, roles,
  texts, tool calls, observations, final answer; not tokens, latencies or timestamps) as a kept
  run, or the same normalized question as a *different* kept task;
* **near duplicate**: the question's word shingles have a Jaccard similarity of at least the
  threshold with a different kept task's question (MinHash LSH from ``datasketch``; candidates are
  confirmed with the estimated Jaccard unless ``verify`` is off, so the banding favours recall);
* **task cap**: a task already has ``max_per_task`` kept runs.

The state is hashes only: a 64-bit hash per kept run, a 64-bit hash and a count per kept task, the
LSH band tables and (with ``verify``) one uint32 MinHash signature per kept task: about 8 KB per
kept task with the defaults, most of it datasketch's band tables (20 bands of a bytes key and a
bucket set each). It does not grow with the size of the trajectories.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from datasketch import MinHash, MinHashLSH

from coa.curate.config import DedupConfig
from coa.curate.filters import Rejection
from coa.curate.text import shingles, stable_hash

CONTENT_FIELDS = ("agent", "role", "text", "tool_name", "tool_args", "observation")


def content_hash(row: Mapping[str, Any]) -> int:
    """Hash of what a run *says*: every step's content fields and the final answer."""

    def parts() -> Iterable[str | None]:
        for step in row.get("steps") or ():
            for f in CONTENT_FIELDS:
                yield step.get(f)
            yield "\x1e"
        yield row.get("final_answer")

    return stable_hash(parts())


class Deduplicator:
    """Streaming duplicate filter; call :meth:`check` on runs in input order."""

    def __init__(self, cfg: DedupConfig) -> None:
        self.cfg = cfg
        self._runs: set[int] = set()  # question + content hashes of kept runs
        self._questions: dict[int, str] = {}  # normalized question hash -> first kept task_id
        self._tasks: dict[str, int] = {}  # task_id -> kept runs
        self._signatures: dict[str, np.ndarray] = {}
        self._template = MinHash(num_perm=cfg.num_perm, seed=1)
        # with verification, band the LSH for recall (false candidates are checked away); without,
        # weigh false positives and negatives alike
        weights = (0.1, 0.9) if cfg.verify else (0.5, 0.5)
        self._lsh = MinHashLSH(threshold=cfg.near_threshold, num_perm=cfg.num_perm, weights=weights)

    def _minhash(self, normalized_question: str) -> MinHash:
        m = MinHash(num_perm=self.cfg.num_perm, permutations=self._template.permutations, scheme="affine32")
        m.update_batch(
            [s.encode("utf-8") for s in sorted(shingles(normalized_question, self.cfg.shingle_size))]
        )
        return m

    def check(self, task_id: str, normalized_question: str, run_content_hash: int) -> Rejection | None:
        """Reject the run as a duplicate, or keep it and remember it."""
        cfg = self.cfg
        run_key = stable_hash([normalized_question, str(run_content_hash)])
        question_key = stable_hash([normalized_question])
        if cfg.exact:
            if run_key in self._runs:
                return Rejection("exact_duplicate", "same question and same steps as a run already kept")
            first_task = self._questions.get(question_key)
            if first_task is not None and first_task != task_id:
                return Rejection(
                    "exact_duplicate", f"question identical (normalized) to kept task {first_task}"
                )
        new_task = task_id not in self._tasks
        minhash: MinHash | None = None
        if new_task and cfg.near and normalized_question:
            minhash = self._minhash(normalized_question)
            match = self._near_match(task_id, minhash)
            if match is not None:
                other, jaccard = match
                return Rejection(
                    "near_duplicate",
                    f"question ~{jaccard:.2f} Jaccard (word {cfg.shingle_size}-shingles) "
                    f"with kept task {other}",
                )
        kept = self._tasks.get(task_id, 0)
        if cfg.max_per_task is not None and kept >= cfg.max_per_task:
            return Rejection(
                "task_cap", f"task {task_id} already has {kept} kept runs (max {cfg.max_per_task})"
            )
        # keep: remember it
        self._runs.add(run_key)
        self._questions.setdefault(question_key, task_id)
        self._tasks[task_id] = kept + 1
        if minhash is not None:
            self._lsh.insert(task_id, minhash, check_duplication=False)
            if cfg.verify:
                self._signatures[task_id] = np.asarray(minhash.hashvalues, dtype=np.uint32)
        return None

    def _near_match(self, task_id: str, minhash: MinHash) -> tuple[str, float] | None:
        best: tuple[str, float] | None = None
        for other in sorted(self._lsh.query(minhash)):
            if other == task_id:
                continue
            if not self.cfg.verify:
                return str(other), float("nan")
            sig = self._signatures[other]
            jaccard = float(np.count_nonzero(sig == minhash.hashvalues)) / len(sig)
            if jaccard >= self.cfg.near_threshold and (best is None or jaccard > best[1]):
                best = (str(other), jaccard)
        return best

    def check_many(
        self, task_ids: Sequence[str], questions: Sequence[str], hashes: Sequence[int]
    ) -> list[Rejection | None]:
        """:meth:`check` for several runs, in order."""
        return [self.check(t, q, h) for t, q, h in zip(task_ids, questions, hashes, strict=True)]

    @property
    def kept_tasks(self) -> int:
        return len(self._tasks)

    def approx_bytes(self) -> int:
        """Rough size of the state in bytes: hash sets and dicts, signatures, and the LSH tables
        (per kept task and band: the band's bytes key, a bucket set and a dict slot, ~380 bytes)."""
        size = sys.getsizeof(self._runs) + 32 * len(self._runs)
        size += sys.getsizeof(self._questions) + sum(32 + sys.getsizeof(t) for t in self._questions.values())
        size += sys.getsizeof(self._tasks) + sum(sys.getsizeof(t) + 28 for t in self._tasks)
        size += sum(s.nbytes + 112 for s in self._signatures.values())
        b, r = self._lsh.b, self._lsh.r
        size += len(self._signatures or self._tasks) * (b * (33 + 4 * r + 216 + 100) + 64 + 8 * b)
        return size
