"""Exact and near-duplicate removal of trajectories and tasks, streaming, first one kept.

Three rules, applied to runs in input order (only runs that passed every other check are seen):

* **exact duplicate**: the same normalized question and the same step content (agents, roles,
  texts, tool calls, observations, final answer; not tokens, latencies or timestamps) as a kept
  run, or the same normalized question as a *different* kept task;
* **near duplicate**: the question's word shingles have a Jaccard similarity of at least the
  threshold with a different kept task's question (MinHash LSH, :mod:`coa.curate.minhash`, the
  same signatures and banding as datasketch's ``MinHashLSH``; candidates are confirmed with the
  estimated Jaccard unless ``verify`` is off, so the banding favours recall);
* **task cap**: a task already has ``max_per_task`` kept runs.

A batch is decided at once: hashes, signatures and band keys are computed with numpy/Polars and
looked up against the state of the previous batches in one pass, then a short loop walks the runs
in order to settle what depends on the runs before them in the same batch. The state is compact
arrays only: per kept run a 64-bit key (12 bytes with its slot), per kept task a 64-bit task key,
a question key, a run count and its id's bytes, and, with ``near``, one band key + item per band
(12 bytes each): about 0.1-0.3 KB per kept task with the defaults, against ~7.5 KB with
datasketch's dict-based LSH. With ``verify`` one ``uint32`` signature per kept task (4 bytes a
permutation) goes to an anonymous temporary file, read back only for a batch's LSH candidates. It
does not grow with the size of the trajectories.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from coa.curate.config import DedupConfig
from coa.curate.filters import Rejection
from coa.curate.frames import step_frame
from coa.curate.minhash import SortedMultiMap, band_keys, mix64, optimal_bands, signatures
from coa.curate.text import shingles
from coa.lazy import lazy_module

if TYPE_CHECKING:
    import polars as pl
else:
    pl = lazy_module("polars", "curation")

CONTENT_FIELDS = ("agent", "role", "text", "tool_name", "tool_args", "observation")
_SEED = 0x5EED


def _str_hashes(values: pl.Series | Sequence[str | None]) -> np.ndarray:
    series = values if isinstance(values, pl.Series) else pl.Series(list(values), dtype=pl.String)
    return series.hash(seed=_SEED).to_numpy().astype(np.uint64, copy=False)


def content_hashes(table: pa.Table) -> np.ndarray:
    """Per run of a ``trajectory.v1`` table, a 64-bit hash of what it *says*: every step's content
    fields in order (null and empty told apart) and the final answer."""
    steps = step_frame(table, CONTENT_FIELDS)
    acc = np.zeros(table.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        if len(steps):
            h = np.zeros(len(steps), dtype=np.uint64)
            for field in CONTENT_FIELDS:
                h = mix64(h * np.uint64(0x100000001B3) + _str_hashes(steps[field]))
            rows = steps["row"].to_numpy()
            first = np.searchsorted(rows, rows, side="left")
            position = np.arange(len(rows), dtype=np.uint64) - first.astype(np.uint64)
            np.add.at(acc, rows, mix64(h ^ mix64(position + np.uint64(1))))
        n_steps = np.bincount(steps["row"].to_numpy(), minlength=table.num_rows).astype(np.uint64)
        answers = _str_hashes(pl.Series(table.column("final_answer").to_pylist(), dtype=pl.String))
        return mix64(mix64(acc ^ n_steps) + answers * np.uint64(0x9E3779B97F4A7C15))


class _Ids:
    """Kept task ids as one byte buffer and offsets (no Python object per task)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.offsets = array("q", [0])

    def add(self, task_id: str) -> int:
        self.data += task_id.encode("utf-8")
        self.offsets.append(len(self.data))
        return len(self.offsets) - 2

    def __getitem__(self, i: int) -> str:
        return self.data[self.offsets[i] : self.offsets[i + 1]].decode("utf-8")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return len(self.data) + 8 * len(self.offsets)


class _Signatures:
    """Signatures of kept tasks, one ``uint32`` row each, appended to an anonymous temporary file
    and read back (``pread``) only for the LSH candidates of a batch: they never sit in memory, so
    the in-memory state per kept task stays at its keys and band entries."""

    def __init__(self, num_perm: int) -> None:
        self.num_perm = num_perm
        self.width = 4 * num_perm
        # lives as long as the index (closed by Deduplicator.close, or when collected)
        self._file = tempfile.TemporaryFile(prefix="coa-minhash-")  # noqa: SIM115
        self.n = 0

    def append(self, sigs: np.ndarray) -> None:
        data = np.ascontiguousarray(sigs, dtype="<u4").tobytes()
        os.pwrite(self._file.fileno(), data, self.n * self.width)
        self.n += len(sigs)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The signatures of ``rows`` (repeats allowed), each distinct row read once."""
        unique, inverse = np.unique(rows, return_inverse=True)
        fd, width = self._file.fileno(), self.width
        data = b"".join(os.pread(fd, width, int(r) * width) for r in unique.tolist())
        return np.frombuffer(data, dtype="<u4").reshape(len(unique), self.num_perm)[inverse]

    @property
    def disk_bytes(self) -> int:
        return self.n * self.width

    def close(self) -> None:
        self._file.close()


class Deduplicator:
    """Streaming duplicate filter; call :meth:`check_many` on batches of runs in input order."""

    def __init__(self, cfg: DedupConfig) -> None:
        self.cfg = cfg
        self._runs = SortedMultiMap()  # run key (question + content) -> 0
        self._questions = SortedMultiMap()  # question key -> first kept task
        self._tasks = SortedMultiMap()  # task key -> task index
        self._ids = _Ids()  # task index -> task_id
        self._counts = array("i")  # task index -> kept runs
        self._bands = SortedMultiMap()  # band key -> signature row
        self._sig_task = array("i")  # signature row -> task index
        self._sigs = _Signatures(cfg.num_perm)
        # with verification, band for recall (false candidates are checked away); without, weigh
        # false positives and negatives alike (datasketch's MinHashLSH weights)
        weights = (0.1, 0.9) if cfg.verify else (0.5, 0.5)
        self.bands, self.rows = optimal_bands(cfg.near_threshold, cfg.num_perm, *weights)

    # -- one batch ------------------------------------------------------------------------------
    def check_many(
        self, task_ids: Sequence[str], questions: Sequence[str], content: Sequence[int] | np.ndarray
    ) -> list[Rejection | None]:
        """Reject each run as a duplicate, or keep it and remember it (in order)."""
        n = len(task_ids)
        if n == 0:
            return []
        cfg = self.cfg
        q_keys = _str_hashes(questions)
        t_keys = _str_hashes(task_ids)
        with np.errstate(over="ignore"):
            run_keys = mix64(q_keys ^ mix64(np.asarray(content, dtype=np.uint64) + np.uint64(1)))
        seen_run = self._runs.get_first(run_keys) >= 0
        q_first = self._questions.get_first(q_keys)
        t_index = self._tasks.get_first(t_keys)
        near_rows, sigs, keys, old_best, batch_pairs = self._near_candidates(questions, t_index)
        sig_of = {int(i): k for k, i in enumerate(near_rows)}

        out: list[Rejection | None] = []
        new_runs: set[int] = set()
        new_questions: dict[int, int] = {}
        new_tasks: dict[int, int] = {}
        inserted: list[int] = []  # positions in near_rows whose task was kept (signature inserted)
        inserted_task: dict[int, int] = {}  # batch row -> its new task index
        for i in range(n):
            task_id, rk, qk, tk = task_ids[i], int(run_keys[i]), int(q_keys[i]), int(t_keys[i])
            if cfg.exact:
                if seen_run[i] or rk in new_runs:
                    out.append(
                        Rejection("exact_duplicate", "same question and same steps as a run already kept")
                    )
                    continue
                first = int(q_first[i]) if q_first[i] >= 0 else new_questions.get(qk, -1)
                if first >= 0 and self._ids[first] != task_id:
                    out.append(
                        Rejection(
                            "exact_duplicate",
                            f"question identical (normalized) to kept task {self._ids[first]}",
                        )
                    )
                    continue
            tid = int(t_index[i]) if t_index[i] >= 0 else new_tasks.get(tk, -1)
            if tid < 0 and i in sig_of:
                match = self._best(i, old_best.get(i, []), batch_pairs.get(i, []), inserted_task)
                if match is not None:
                    other, jaccard = match
                    out.append(
                        Rejection(
                            "near_duplicate",
                            f"question ~{jaccard:.2f} Jaccard (word {cfg.shingle_size}-shingles) "
                            f"with kept task {other}",
                        )
                    )
                    continue
            kept = self._counts[tid] if tid >= 0 else 0
            if cfg.max_per_task is not None and kept >= cfg.max_per_task:
                out.append(
                    Rejection(
                        "task_cap", f"task {task_id} already has {kept} kept runs (max {cfg.max_per_task})"
                    )
                )
                continue
            # keep: remember it
            if tid < 0:
                tid = self._ids.add(task_id)
                self._counts.append(0)
                new_tasks[tk] = tid
                if i in sig_of:
                    inserted.append(sig_of[i])
                    inserted_task[i] = tid
            self._counts[tid] += 1
            new_runs.add(rk)
            if q_first[i] < 0:
                new_questions.setdefault(qk, tid)
            out.append(None)

        self._commit(new_runs, new_questions, new_tasks, near_rows, sigs, keys, inserted, inserted_task)
        return out

    def check(self, task_id: str, normalized_question: str, run_content_hash: int) -> Rejection | None:
        """:meth:`check_many` for one run."""
        return self.check_many([task_id], [normalized_question], [run_content_hash])[0]

    # -- near duplicates ------------------------------------------------------------------------
    def _near_candidates(
        self, questions: Sequence[str], t_index: np.ndarray
    ) -> tuple[
        np.ndarray,
        np.ndarray,
        np.ndarray,
        dict[int, list[tuple[str, float]]],
        dict[int, list[tuple[int, float]]],
    ]:
        """Signatures and band keys of the runs of tasks not kept before, and their candidates:
        verified kept tasks of earlier batches ``(task_id, jaccard)`` per row, and earlier rows of
        this batch sharing a band ``(row, jaccard)`` (kept or not: the walk decides)."""
        cfg = self.cfg
        empty = np.empty((0, cfg.num_perm), dtype=np.uint32)
        if not cfg.near:
            return np.empty(0, np.int64), empty, np.empty((0, 0), np.uint64), {}, {}
        rows = np.array([i for i, q in enumerate(questions) if q and t_index[i] < 0], dtype=np.int64)
        if len(rows) == 0:
            return rows, empty, np.empty((0, 0), np.uint64), {}, {}
        sigs = signatures([sorted(shingles(questions[i], cfg.shingle_size)) for i in rows], cfg.num_perm)
        keys = band_keys(sigs, self.bands, self.rows)
        nan = float("nan")

        old: dict[int, list[tuple[str, float]]] = {}
        query, sig_row = self._bands.lookup(keys.ravel())
        if len(query):
            pairs = np.unique(np.stack([query // self.bands, sig_row.astype(np.int64)], axis=1), axis=0)
            local, sig_row = pairs[:, 0], pairs[:, 1]
            jac = self._jaccard(sigs[local], self._sigs.take(sig_row)) if cfg.verify else None
            for k, (loc, srow) in enumerate(zip(local.tolist(), sig_row.tolist(), strict=True)):
                j = nan if jac is None else float(jac[k])
                if jac is None or j >= cfg.near_threshold:
                    old.setdefault(int(rows[loc]), []).append((self._ids[self._sig_task[srow]], j))

        batch: dict[int, list[tuple[int, float]]] = {}
        flat = keys.ravel()
        order = np.argsort(flat, kind="stable")
        sorted_keys = flat[order]
        dup = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
        if len(dup):
            starts = np.unique(np.searchsorted(sorted_keys, sorted_keys[dup], side="left"))
            ends = np.searchsorted(sorted_keys, sorted_keys[starts], side="right")
            pair_set: set[tuple[int, int]] = set()
            for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
                members = sorted({int(m) for m in order[s:e] // self.bands})
                for a_pos, a in enumerate(members):
                    for b in members[a_pos + 1 :]:
                        pair_set.add((b, a))  # later row b may match earlier row a
            pairs_arr = np.array(sorted(pair_set), dtype=np.int64)
            jac = self._jaccard(sigs[pairs_arr[:, 0]], sigs[pairs_arr[:, 1]]) if cfg.verify else None
            for k, (later, earlier) in enumerate(pairs_arr.tolist()):
                j = nan if jac is None else float(jac[k])
                if jac is None or j >= cfg.near_threshold:
                    batch.setdefault(int(rows[later]), []).append((int(rows[earlier]), j))
        return rows, sigs, keys, old, batch

    @staticmethod
    def _jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(a), dtype=np.float64)
        step = 4096
        for lo in range(0, len(a), step):
            hits = np.count_nonzero(a[lo : lo + step] == b[lo : lo + step], axis=1)
            out[lo : lo + step] = hits / a.shape[1]
        return out

    def _best(
        self,
        row: int,
        old: list[tuple[str, float]],
        batch: list[tuple[int, float]],
        inserted_task: dict[int, int],
    ) -> tuple[str, float] | None:
        """The kept task this row's question nearly duplicates: the highest estimated Jaccard, ties
        to the smallest task id (without ``verify``: the smallest task id), as datasketch's walk."""
        found = list(old) + [(self._ids[inserted_task[e]], j) for e, j in batch if e in inserted_task]
        if not found:
            return None
        if not self.cfg.verify:
            return min(found, key=lambda c: c[0])
        return min(found, key=lambda c: (-c[1], c[0]))

    def _commit(
        self,
        new_runs: set[int],
        new_questions: dict[int, int],
        new_tasks: dict[int, int],
        near_rows: np.ndarray,
        sigs: np.ndarray,
        keys: np.ndarray,
        inserted: list[int],
        inserted_task: dict[int, int],
    ) -> None:
        u64 = np.uint64
        self._runs.insert(np.fromiter(new_runs, u64, len(new_runs)), np.zeros(len(new_runs), np.int32))
        self._questions.insert(
            np.fromiter(new_questions.keys(), u64, len(new_questions)),
            np.fromiter(new_questions.values(), np.int64, len(new_questions)),
        )
        self._tasks.insert(
            np.fromiter(new_tasks.keys(), u64, len(new_tasks)),
            np.fromiter(new_tasks.values(), np.int64, len(new_tasks)),
        )
        if not inserted:
            return
        at = np.asarray(inserted, dtype=np.int64)
        first_row = len(self._sig_task)
        sig_rows = np.arange(first_row, first_row + len(at), dtype=np.int64)
        self._sig_task.extend(inserted_task[int(near_rows[k])] for k in at.tolist())
        if self.cfg.verify:
            self._sigs.append(sigs[at])
        self._bands.insert(keys[at].ravel(), np.repeat(sig_rows, self.bands))

    # -- state ----------------------------------------------------------------------------------
    @property
    def kept_tasks(self) -> int:
        return len(self._ids)

    def approx_bytes(self) -> int:
        """Size of the in-memory state in bytes: the sorted key arrays, the ids and counts."""
        maps = self._runs.nbytes + self._questions.nbytes + self._tasks.nbytes + self._bands.nbytes
        arrays = 4 * len(self._counts) + 4 * len(self._sig_task)
        return maps + arrays + self._ids.nbytes

    def close(self) -> None:
        """Drop the signature file (the index cannot be queried afterwards)."""
        self._sigs.close()

    def disk_bytes(self) -> int:
        """Bytes of signatures kept in the temporary file (with ``verify``), not in memory."""
        return self._sigs.disk_bytes
