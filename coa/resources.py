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


GENERATION_MMAP_THRESHOLD = 4 * _MIB
"""Inside :func:`generation_heap`, heap blocks of this size or more get their own mapping."""

_DEFAULT_MMAP_THRESHOLD_MAX = 32 * _MIB  # glibc's ceiling for its dynamic threshold on 64-bit systems
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
_libc: Any = None


def _c_library() -> Any:
    """The process's C library through ctypes (False where it cannot be loaded)."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        try:
            _libc = ctypes.CDLL(name) if name else False
        except OSError:
            _libc = False
    return _libc


def release_free_memory() -> bool:
    """Collect garbage, then return the C heap's free pages to the system (glibc's ``malloc_trim``).

    Returns whether anything could be handed back (False where the C library has no
    ``malloc_trim``: musl, macOS). Frees nothing that is in use: only pages glibc already holds free.
    """
    gc.collect()
    libc = _c_library()
    trim = getattr(libc, "malloc_trim", None) if libc else None
    if trim is None:
        return False
    return bool(trim(0))


_heap_lock = threading.Lock()
_heap_users = 0
_heap_applied = False


def _mmap_threshold(value: int) -> bool:
    libc = _c_library()
    mallopt = getattr(libc, "mallopt", None) if libc else None
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, value))


@contextmanager
def generation_heap(threshold: int = GENERATION_MMAP_THRESHOLD) -> Iterator[bool]:
    """While generating, give every heap block of ``threshold`` bytes or more its own mapping.

    A generation's KV cache grows by concatenation: each decode step allocates each layer's keys and
    values a little larger and frees the old ones. glibc serves such blocks from its heaps once its
    dynamic mmap threshold has risen (it rises to the largest block freed, up to 32 MiB), and the
    freed, ever-smaller-than-needed holes stay resident: the demo's evaluation of 200 held-out tasks
    raised the process's memory by 0.8-2.5 GiB from run to run (``bench/README.md``, "The heap of a
    generation", 2026-11-27). Mapped blocks go back to the system when freed. On leaving (the last of
    concurrent users), the threshold is set to glibc's dynamic ceiling, where training's steady state
    puts it anyway (below it, a training step's large tensors would be mapped and unmapped every step:
    ~11% fewer SFT steps a minute with 1 MiB throughout).

    Yields whether the threshold was set: False where the C library has no ``mallopt`` (musl, macOS)
    and where ``MALLOC_MMAP_THRESHOLD_`` is set (the user's choice stands).
    """
    global _heap_users, _heap_applied
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        yield False
        return
    with _heap_lock:
        _heap_users += 1
        if _heap_users == 1:
            _heap_applied = _mmap_threshold(threshold)
        applied = _heap_applied
    try:
        yield applied
    finally:
        with _heap_lock:
            _heap_users -= 1
            if _heap_users == 0:
                _mmap_threshold(_DEFAULT_MMAP_THRESHOLD_MAX)


def processor_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model as the kernel names it (``lscpu``'s "Model name"), else ``platform``'s guess.

    Training results record it beside their speed: the same plan's steps per minute differ ~3x between
    CPU kinds (docs/performance.md), so a timing without its CPU cannot be compared.
    """
    import platform

    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: str) -> str:
    """``device``'s hardware: a CUDA device's name, else the CPU's model and the threads torch uses."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return str(torch.cuda.get_device_name(torch.device(device)))
    return f"{processor_name()}, {torch.get_num_threads()} threads"


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
