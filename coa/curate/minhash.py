"""MinHash signatures of many texts at once, and a banded LSH index held in sorted numpy arrays.

Signatures are exactly datasketch's ``MinHash(num_perm, seed=1, scheme="affine32")`` of the same
shingles: each shingle's SHA-1 (first 4 bytes, little endian), the MurmurHash3 32-bit finalizer,
then ``num_perm`` affine permutations ``a * h + b mod 2**32`` (``a`` odd, drawn from
``numpy.random.RandomState(1)`` in datasketch's order), the minimum per permutation. They are
computed for a whole batch of texts with numpy (one ``uint32`` row per text), in slices that bound
the temporary ``shingles x num_perm`` matrix.

The band layout is the one datasketch's ``MinHashLSH`` picks for a threshold and weights
(:func:`optimal_bands`: the ``(b, r)`` that minimise the weighted false positive and negative
areas; the integrals by Gauss-Legendre quadrature). A band of a signature becomes one 64-bit key
(its ``r`` values mixed, salted with the band number), and :class:`SortedMultiMap` keeps every key
of every kept item in one sorted ``uint64`` array beside an ``int32`` item array: 12 bytes per
band and item, against a bytes key, a bucket set and a dict slot per band and item in
datasketch's dict storage. Two items are candidates when one band key is equal; a 64-bit key
collision of different bands (odds ~ items / 2**64) is the only way this differs from
datasketch's byte-equal bands.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence

import numpy as np

SEED = 1
MAX_CELLS = 4_000_000
"""Largest temporary ``shingles x permutations`` matrix (uint32 cells) built at once (16 MB)."""


@functools.cache
def permutations(num_perm: int, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The affine permutation parameters ``(a, b)`` of datasketch's affine32 scheme."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    return a, b


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


def shingle_hashes(shingles: Sequence[str]) -> np.ndarray:
    """The 32-bit SHA-1 prefix of each shingle (datasketch's ``sha1_hash32``), as ``uint32``."""
    raw = b"".join(hashlib.sha1(s.encode("utf-8")).digest()[:4] for s in shingles)
    return np.frombuffer(raw, dtype="<u4").astype(np.uint32)


def signatures(shingle_sets: Sequence[Sequence[str]], num_perm: int) -> np.ndarray:
    """One MinHash signature per shingle set (``len x num_perm`` uint32); every set must be non-empty."""
    out = np.empty((len(shingle_sets), num_perm), dtype=np.uint32)
    if not shingle_sets:
        return out
    a, b = permutations(num_perm)
    sizes = np.fromiter((len(s) for s in shingle_sets), dtype=np.int64, count=len(shingle_sets))
    if np.any(sizes == 0):
        raise ValueError("a MinHash needs at least one shingle")
    hashes = _fmix32(shingle_hashes([s for group in shingle_sets for s in group]))
    starts = np.concatenate(([0], np.cumsum(sizes)))
    rows_per_slice = max(1, MAX_CELLS // (num_perm * max(1, int(sizes.max()))))
    with np.errstate(over="ignore"):
        for lo in range(0, len(shingle_sets), rows_per_slice):
            hi = min(len(shingle_sets), lo + rows_per_slice)
            part = hashes[starts[lo] : starts[hi]]
            permuted = part[:, None] * a[None, :] + b[None, :]
            out[lo:hi] = np.minimum.reduceat(permuted, starts[lo:hi] - starts[lo], axis=0)
    return out


def optimal_bands(threshold: float, num_perm: int, fp_weight: float, fn_weight: float) -> tuple[int, int]:
    """``(bands, rows)`` minimising ``fp_weight * FP area + fn_weight * FN area`` (datasketch's rule)."""
    nodes, weights = np.polynomial.legendre.leggauss(64)

    def area(lo: float, hi: float, b: int, r: int, positive: bool) -> float:
        s = (hi - lo) / 2 * nodes + (hi + lo) / 2
        p = 1 - (1 - s ** float(r)) ** float(b)
        return float((hi - lo) / 2 * np.sum(weights * (p if positive else 1 - p)))

    best, opt = float("inf"), (0, 0)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            err = fp_weight * area(0.0, threshold, b, r, True) + fn_weight * area(threshold, 1.0, b, r, False)
            if err < best:
                best, opt = err, (b, r)
    return opt


def band_keys(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One 64-bit key per band of each signature (``len x bands`` uint64), salted by the band number."""
    n = sigs.shape[0]
    keys = np.empty((n, bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for band in range(bands):
            h = np.full(n, np.uint64(0x9E3779B97F4A7C15) * np.uint64(band + 1), dtype=np.uint64)
            for col in sigs[:, band * rows : (band + 1) * rows].T:
                h = _mix64(h ^ col.astype(np.uint64))
            keys[:, band] = h
    return keys


def _mix64(h: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (wrapping uint64 arithmetic)."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def mix64(h: np.ndarray) -> np.ndarray:
    """:func:`_mix64` with overflow warnings silenced (the wrap is the point)."""
    with np.errstate(over="ignore"):
        return _mix64(np.asarray(h, dtype=np.uint64))


SEGMENT_ENTRIES = 1 << 20
"""Entries of a :class:`SortedMultiMap` segment before it is sealed (12 MB: a key and a value each)."""


class SortedMultiMap:
    """``uint64`` key → ``int32`` values (a key may repeat), as sorted segments of two arrays.

    Lookups are vectorised (``searchsorted`` in each segment); :meth:`insert` merges a batch of new
    pairs into the open segment in one pass, so batches, not single items, should be inserted when
    there are many. A segment is sealed once it holds ``segment_entries`` pairs and never copied
    again: an insert copies at most one segment, not the whole map, so the map never needs twice
    its size, and inserting n pairs costs O(n) copies, not O(n²).
    """

    def __init__(self, segment_entries: int = SEGMENT_ENTRIES) -> None:
        self.segment_entries = segment_entries
        self._sealed: list[tuple[np.ndarray, np.ndarray]] = []  # oldest first
        self.keys = np.empty(0, dtype=np.uint64)  # the open segment (newest)
        self.values = np.empty(0, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.keys) + sum(len(k) for k, _ in self._sealed)

    def _segments(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [*self._sealed, (self.keys, self.values)]

    def insert(self, keys: np.ndarray, values: np.ndarray) -> None:
        if len(keys) == 0:
            return
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order].astype(np.int32)
        at = np.searchsorted(self.keys, keys, side="right")
        self.keys = np.insert(self.keys, at, keys)
        self.values = np.insert(self.values, at, values)
        if len(self.keys) >= self.segment_entries:
            self._sealed.append((self.keys, self.values))
            self.keys = np.empty(0, dtype=np.uint64)
            self.values = np.empty(0, dtype=np.int32)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every stored ``(query position, value)`` pair whose key equals a query key, by query
        position, then in insertion order."""
        queries, found = [], []
        for seg_keys, seg_values in self._segments():
            lo = np.searchsorted(seg_keys, keys, side="left")
            hi = np.searchsorted(seg_keys, keys, side="right")
            counts = hi - lo
            total = int(counts.sum())
            if total == 0:
                continue
            queries.append(np.repeat(np.arange(len(keys), dtype=np.int64), counts))
            offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            found.append(seg_values[np.repeat(lo, counts) + offsets])
        if not queries:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        query, values = np.concatenate(queries), np.concatenate(found)
        order = np.argsort(query, kind="stable")  # segments are oldest first: insertion order kept
        return query[order], values[order]

    def get_first(self, keys: np.ndarray) -> np.ndarray:
        """The first value stored under each key, -1 where the key is absent."""
        out = np.full(len(keys), -1, dtype=np.int64)
        todo = np.arange(len(keys))
        for seg_keys, seg_values in self._segments():  # oldest first: the first hit is the first stored
            if len(todo) == 0 or len(seg_keys) == 0:
                continue
            want = keys[todo]
            at = np.searchsorted(seg_keys, want, side="left")
            found = at < len(seg_keys)
            found[found] = seg_keys[at[found]] == want[found]
            out[todo[found]] = seg_values[at[found]]
            todo = todo[~found]
        return out

    @property
    def nbytes(self) -> int:
        return int(sum(k.nbytes + v.nbytes for k, v in self._segments()))
