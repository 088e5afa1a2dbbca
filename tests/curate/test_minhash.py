"""The compact near-duplicate index against datasketch: same signatures, bands and verdicts."""

from __future__ import annotations

import random

import numpy as np
import pytest
from datasketch import MinHash, MinHashLSH
from datasketch.lsh import _optimal_param

from coa.curate.config import DedupConfig
from coa.curate.dedup import Deduplicator
from coa.curate.minhash import SortedMultiMap, optimal_bands, signatures
from coa.curate.text import normalize, shingles
from tests.curate.rows import question


def _fixed_set() -> list[tuple[str, str]]:
    """(task_id, normalized question): 120 distinct questions, then edits of them (1-4 words
    changed, words dropped or appended) under new task ids, shuffled with a fixed seed."""
    rnd = random.Random(7)
    base = [normalize(question(i, words=10 + i % 12)) for i in range(120)]
    out = [(f"b{i}", q) for i, q in enumerate(base)]
    for k in range(240):
        words = base[rnd.randrange(len(base))].split()
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            if op < 0.5:
                words[rnd.randrange(len(words))] = f"w{rnd.randrange(50)}"
            elif op < 0.8 and len(words) > 3:
                del words[rnd.randrange(len(words))]
            else:
                words.append(f"x{rnd.randrange(50)}")
        out.append((f"e{k}", " ".join(words)))
    rnd.shuffle(out)
    return out


def _datasketch_verdicts(items: list[tuple[str, str]], cfg: DedupConfig) -> list[str | None]:
    """The previous implementation's near-duplicate rule, on datasketch's MinHashLSH."""
    weights = (0.1, 0.9) if cfg.verify else (0.5, 0.5)
    lsh = MinHashLSH(threshold=cfg.near_threshold, num_perm=cfg.num_perm, weights=weights)
    sigs: dict[str, np.ndarray] = {}
    out: list[str | None] = []
    for task_id, q in items:
        m = MinHash(num_perm=cfg.num_perm, seed=1)
        m.update_batch([s.encode() for s in sorted(shingles(q, cfg.shingle_size))])
        best: tuple[str, float] | None = None
        for other in sorted(lsh.query(m)):
            if not cfg.verify:
                best = (other, float("nan"))
                break
            j = float(np.count_nonzero(sigs[other] == m.hashvalues)) / cfg.num_perm
            if j >= cfg.near_threshold and (best is None or j > best[1]):
                best = (other, j)
        if best is not None:
            out.append(best[0])
            continue
        lsh.insert(task_id, m, check_duplication=False)
        sigs[task_id] = np.asarray(m.hashvalues, dtype=np.uint32)
        out.append(None)
    return out


def test_signatures_and_bands_equal_datasketch() -> None:
    sets = [sorted(shingles(q, 3)) for _, q in _fixed_set()[:50]] + [["one"], ["a b c", "b c d"]]
    ours = signatures(sets, 128)
    for shingle_set, row in zip(sets, ours, strict=True):
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([s.encode() for s in shingle_set])
        assert np.array_equal(row, m.hashvalues)
    for threshold in (0.5, 0.7, 0.8, 0.9):
        for weights in ((0.1, 0.9), (0.5, 0.5)):
            assert optimal_bands(threshold, 128, *weights) == _optimal_param(threshold, 128, *weights)
    with pytest.raises(ValueError):
        signatures([[]], 16)


@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("batch", [1, 37, 400])
def test_same_near_duplicates_as_datasketch(verify: bool, batch: int) -> None:
    items = _fixed_set()
    cfg = DedupConfig(near_threshold=0.7, verify=verify, exact=False, max_per_task=None)
    expected = _datasketch_verdicts(items, cfg)
    assert sum(e is not None for e in expected) > 40  # the set really has near duplicates
    d = Deduplicator(cfg)
    got: list[str | None] = []
    for lo in range(0, len(items), batch):
        part = items[lo : lo + batch]
        verdicts = d.check_many([t for t, _ in part], [q for _, q in part], list(range(lo, lo + len(part))))
        for v in verdicts:
            assert v is None or v.reason == "near_duplicate"
            got.append(None if v is None else v.detail.rsplit(" ", 1)[-1])
    assert got == expected
    assert d.kept_tasks == sum(e is None for e in expected)


def test_state_per_kept_task_is_compact() -> None:
    d = Deduplicator(DedupConfig(max_per_task=None))
    n = 2000
    for lo in range(0, n, 500):
        ids = [f"task:{i}" for i in range(lo, lo + 500)]
        qs = [normalize(question(i)) for i in range(lo, lo + 500)]
        assert d.check_many(ids, qs, list(range(lo, lo + 500))) == [None] * 500
    per_task = d.approx_bytes() / n
    # in memory: 20 bands x 12 bytes, run/question/task keys, count, id bytes: ~0.3 KB, not ~7.5 KB;
    # the 512-byte signatures are on disk
    assert per_task < 400, per_task
    assert d.disk_bytes() == n * 128 * 4


def test_sorted_multimap_lookup_and_first() -> None:
    m = SortedMultiMap()
    m.insert(np.array([5, 3, 5], dtype=np.uint64), np.array([1, 2, 3]))
    m.insert(np.array([2**64 - 1, 3], dtype=np.uint64), np.array([4, 5]))
    query, values = m.lookup(np.array([5, 7, 3], dtype=np.uint64))
    assert sorted(zip(query.tolist(), values.tolist(), strict=True)) == [(0, 1), (0, 3), (2, 2), (2, 5)]
    assert m.get_first(np.array([3, 2**64 - 1, 9], dtype=np.uint64)).tolist() == [2, 4, -1]


def test_sorted_multimap_segments_answer_like_one_array() -> None:
    """Sealed segments (small here) give the same lookups, first values and order as one array."""
    rng = np.random.default_rng(7)
    one, segmented = SortedMultiMap(segment_entries=10**9), SortedMultiMap(segment_entries=50)
    for batch in range(12):
        keys = rng.integers(0, 40, size=30).astype(np.uint64)
        values = np.arange(batch * 30, batch * 30 + 30)
        one.insert(keys, values)
        segmented.insert(keys, values)
    assert len(segmented._sealed) > 3 and len(one) == len(segmented) == 360
    assert one.nbytes == segmented.nbytes
    queries = rng.integers(0, 50, size=80).astype(np.uint64)
    for got, want in zip(segmented.lookup(queries), one.lookup(queries), strict=True):
        assert got.tolist() == want.tolist()
    assert segmented.get_first(queries).tolist() == one.get_first(queries).tolist()
