"""What building a step used: wall time and peak resident memory (:class:`BuildResources`).

The runner (:mod:`coa.steps`) measures every step it builds with :func:`measure` and records the
figures in the artifact's lineage (``resources``) and the run's stage table, so "which step holds
the memory" is answered by the run itself, not by a second run under a profiler.

The step's peak is the building process's resident set size: exact when the step raised the
process's lifetime peak (``ru_maxrss``), otherwise the highest of samples taken every
:data:`SAMPLE_INTERVAL_S` from ``/proc/self/statm`` (a lower bound on a peak shorter than the
interval). Child processes the step started and waited for (the sandbox's programs, a trainer
launched as a subprocess) are reported apart, when one of them set a new high for the process's
children. The figures never reset the kernel's high-water marks, so an outer ``/usr/bin/time -v``
still reads the whole run's peak.

After each build the runner hands the heap's free pages back to the system
(:func:`release_free_memory`): glibc keeps what a step freed (many small blocks, per-thread arenas)
mapped, so without it the next step starts at the last one's high-water mark. Measured on the
evaluation of the demo's trained student (200 held-out tasks): 844 MiB after the evaluation, 840
after ``gc.collect``, 600 after ``malloc_trim`` (``bench/README.md``, 2026-11-27).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import gc
import os
import resource
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

SAMPLE_INTERVAL_S = 0.2
"""How often the sampler reads the process's resident set size during a build."""

_MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class BuildResources:
    """Wall time and peak memory of one step's build."""

    wall_s: float
    peak_rss_mib: float | None
    """The building process's peak resident memory during the build (None where it cannot be read)."""
    children_peak_rss_mib: float | None = None
    """The largest child process waited for during the build, when it set a new high for the children."""

    def to_json(self) -> dict[str, float | None]:
        return {k: None if v is None else round(v, 2) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> BuildResources | None:
        """The record :meth:`to_json` wrote (None for an artifact built before it was recorded)."""
        if not data or "wall_s" not in data:
            return None
        return cls(float(data["wall_s"]), data.get("peak_rss_mib"), data.get("children_peak_rss_mib"))


_libc: Any = None


def release_free_memory() -> bool:
    """Collect garbage, then return the C heap's free pages to the system (glibc's ``malloc_trim``).

    Returns whether anything could be handed back (False where the C library has no
    ``malloc_trim``: musl, macOS). Frees nothing that is in use: only pages glibc already holds free.
    """
    global _libc
    gc.collect()
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            _libc = ctypes.CDLL(name) if name else False
        except OSError:
            _libc = False
    trim = getattr(_libc, "malloc_trim", None) if _libc else None
    if trim is None:
        return False
    return bool(trim(0))


def _maxrss_mib(who: int) -> float:
    """``ru_maxrss`` in MiB (Linux reports KiB, macOS bytes)."""
    value = resource.getrusage(who).ru_maxrss
    return value / _MIB if sys.platform == "darwin" else value / 1024


def _current_rss_mib() -> float | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / _MIB
    except (OSError, ValueError, IndexError):
        return None


class _Meter:
    def __init__(self) -> None:
        self.result: BuildResources | None = None
        self._peak = _current_rss_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="coa-build-meter", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            now = _current_rss_mib()
            if now is not None and (self._peak is None or now > self._peak):
                self._peak = now


@contextmanager
def measure() -> Iterator[_Meter]:
    """Measure the enclosed build; ``meter.result`` holds its :class:`BuildResources` afterwards
    (also when the build raised)."""
    meter = _Meter()
    self_before, children_before = _maxrss_mib(resource.RUSAGE_SELF), _maxrss_mib(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    meter._thread.start()
    try:
        yield meter
    finally:
        meter._stop.set()
        meter._thread.join()
        wall = time.perf_counter() - start
        self_after, children_after = _maxrss_mib(resource.RUSAGE_SELF), _maxrss_mib(resource.RUSAGE_CHILDREN)
        sampled = meter._peak
        final = _current_rss_mib()
        if final is not None and (sampled is None or final > sampled):
            sampled = final
        peak = self_after if self_after > self_before else sampled
        children = children_after if children_after > children_before else None
        meter.result = BuildResources(wall, peak, children)
