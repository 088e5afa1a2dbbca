"""What a build used (:mod:`coa.resources`): the meter sees memory the block allocates, in the process
and in a child it waits for, and its record survives lineage's JSON; the heap gives back what a build or a
generation freed."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coa import io
from coa.resources import SAMPLE_INTERVAL_S, BuildResources, measure
from coa.steps import run_step
from tests.test_steps import _tasks_step


def test_the_meter_sees_a_peak_the_block_allocated_and_released() -> None:
    with measure() as meter:
        ballast = bytearray(300 * 1024 * 1024)  # touched pages: resident
        ballast[::4096] = b"x" * len(ballast[::4096])
        # held past a few samples: a process whose lifetime peak is already higher (the rest of a
        # test session) is measured by the sampler, which cannot see a spike shorter than its interval
        time.sleep(4 * SAMPLE_INTERVAL_S)
        del ballast
    used = meter.result
    assert used is not None and used.wall_s > 0
    with measure() as quiet:
        pass
    assert quiet.result is not None and quiet.result.peak_rss_mib is not None
    assert used.peak_rss_mib is not None and used.peak_rss_mib >= quiet.result.peak_rss_mib + 250


def test_a_child_that_sets_a_new_high_is_reported_apart() -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024  # MiB
    size = before + 200
    with measure() as meter:
        subprocess.run(
            [sys.executable, "-c", f"b = bytearray({size} * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])"],
            check=True,
        )
    assert meter.result is not None and meter.result.children_peak_rss_mib is not None
    assert meter.result.children_peak_rss_mib >= size
    with measure() as again:  # no child this time: nothing to report for children
        pass
    assert again.result is not None and again.result.children_peak_rss_mib is None


FREED_HEAP = """
import os, sys
from coa.resources import release_free_memory
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
blocks = [b"x" * 4000 + bytes([i % 256]) for i in range(60000)]  # ~240 MiB of small heap blocks
pin = bytearray(4001)  # allocated last: the heap's top stays in use, so free() alone cannot shrink it
del blocks
held = rss()
released = release_free_memory()
print(held, rss(), released)
"""


def test_freed_heap_goes_back_to_the_system_after_a_build() -> None:
    """What a step freed stays resident until the runner trims the heap (glibc)."""
    out = subprocess.run([sys.executable, "-c", FREED_HEAP], check=True, capture_output=True, text=True)
    held, after, released = out.stdout.split()
    if released != "True":
        pytest.skip("needs glibc (malloc_trim): this C library has none")
    assert float(held) - float(after) >= 150, out.stdout


FREED_BLOCKS = """
import contextlib, ctypes, os, sys
from coa.resources import generation_heap
os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
big = libc.malloc(24 * 2**20)
libc.free(big)  # a freed 24 MiB block raises glibc's dynamic mmap threshold, as a model's first forward does
with (generation_heap() if sys.argv[1] == "on" else contextlib.nullcontext()) as applied:
    blocks, pins = [], []
    for _ in range(10):  # 8 MiB blocks (a layer's KV cache), each followed by a small live one
        block = libc.malloc(8 * 2**20)
        ctypes.memset(block, 1, 8 * 2**20)
        blocks.append(block)
        pins.append(libc.malloc(100_000))
    held = rss()
    for block in blocks:
        libc.free(block)
    print(held - rss(), applied)
"""


def test_blocks_a_generation_frees_go_back_to_the_system() -> None:
    """After glibc's dynamic threshold has risen, 80 MiB of freed 8 MiB blocks (each followed by a
    small live block) stay resident; inside generation_heap each had its own mapping and goes back."""

    def returned(mode: str) -> tuple[float, str]:
        out = subprocess.run(
            [sys.executable, "-c", FREED_BLOCKS, mode], check=True, capture_output=True, text=True
        )
        mib, applied = out.stdout.split()
        return float(mib), applied

    on, applied = returned("on")
    if applied != "True":
        pytest.skip("needs glibc (mallopt): this C library has none")
    off, _ = returned("off")
    assert on >= 75 and off < 10, (on, off)


def test_the_heap_threshold_is_set_once_for_concurrent_generations_and_a_users_choice_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coa import resources

    calls: list[int] = []
    monkeypatch.setattr(resources, "_mmap_threshold", lambda value: calls.append(value) or True)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    with resources.generation_heap() as outer, resources.generation_heap() as inner:
        assert outer and inner and calls == [resources.GENERATION_MMAP_THRESHOLD]
    assert calls == [resources.GENERATION_MMAP_THRESHOLD, 32 * 2**20]  # set back once, by the last to leave
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    with resources.generation_heap() as applied:
        assert applied is False
    assert len(calls) == 2


def test_the_record_reads_back_and_old_lineage_has_none() -> None:
    used = BuildResources(wall_s=1.23456, peak_rss_mib=512.3456, children_peak_rss_mib=None)
    assert BuildResources.from_json(used.to_json()) == BuildResources(1.23, 512.35, None)
    assert BuildResources.from_json(None) is None and BuildResources.from_json({}) is None


def test_the_runner_records_a_built_step_and_a_reuse_reports_none(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    built = run_step(_tasks_step(3), store)
    reused = run_step(_tasks_step(3), store)
    assert built.resources is not None and built.resources.peak_rss_mib is not None
    assert reused.reused and reused.resources is None
    recorded = BuildResources.from_json(io.read_lineage(built.ref)["resources"])
    assert recorded == BuildResources.from_json(built.resources.to_json())


def test_the_processor_is_named_as_the_kernel_names_it(tmp_path: Path) -> None:
    from coa.resources import device_name, processor_name

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n"
    )
    assert processor_name(str(cpuinfo)) == "AMD EPYC 7B13"
    assert processor_name(str(tmp_path / "absent")) != ""  # platform's guess, never empty
    import torch

    assert device_name("cpu") == f"{processor_name()}, {torch.get_num_threads()} threads"
