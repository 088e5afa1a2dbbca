"""The harness every benchmark runs through: arguments, timer, machine and GPU info, one JSON record.

A benchmark is a function ``run(args, record) -> None`` registered with :func:`main`::

    from harness import Bench, main   # bench/ is on sys.path when a script there runs

    def run(args, bench: Bench) -> None:
        baseline = bench.time("raw read", lambda: read_raw(), repeat=args.repeat)
        ours = bench.time("checked read", lambda: read_checked(), repeat=args.repeat)
        bench.ratio("checked / raw", ours, baseline)   # a ratio against a baseline run here

    if __name__ == "__main__":
        main(run, __doc__, extra=lambda p: p.add_argument("--rows", type=int, default=50_000))

Every bench accepts ``--repeat N``, ``--quick`` (the small size ``make bench`` runs) and
``--json PATH`` (the record: the command, the machine, each timing's min / median / max, each
ratio, and any figures the bench adds with :meth:`Bench.figure`). Performance is a ratio against a
baseline measured in the same command, never a bare time: CPUs here differ by 2-3x.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Extra = Callable[[argparse.ArgumentParser], Any]


def cpu_model() -> str:
    """The CPU's model name as ``lscpu`` prints it (timings are only comparable on the same model)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def gpu_info() -> dict[str, Any] | None:
    """The first CUDA device's name, memory and capability, or None without one."""
    if "torch" not in sys.modules:
        try:
            import torch  # noqa: F401
        except ImportError:
            return None
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "count": torch.cuda.device_count(),
    }


def machine() -> dict[str, Any]:
    """What a timing depends on: CPU model, cores, Python, torch and the GPU, if any."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "host": platform.node(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    info["gpu"] = gpu_info()
    return info


@dataclasses.dataclass(frozen=True)
class Timing:
    """One measured operation over ``repeat`` runs, in seconds."""

    name: str
    times: tuple[float, ...]

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def as_dict(self) -> dict[str, Any]:
        return {
            "min_s": self.best,
            "median_s": self.median,
            "max_s": max(self.times),
            "runs": len(self.times),
        }


@dataclasses.dataclass
class Bench:
    """What one bench run measured; written as one JSON record by :func:`main`."""

    name: str
    args: dict[str, Any]
    timings: dict[str, Timing] = dataclasses.field(default_factory=dict)
    ratios: dict[str, float] = dataclasses.field(default_factory=dict)
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)
    sink: Path | None = None
    """Where the record is rewritten as each figure is measured (``--json``): a bench stopped at its
    time bound (``timeout``) still leaves what it measured, marked ``"complete": false``."""

    def save(self, complete: bool = False) -> None:
        """Write the record so far to :attr:`sink` (atomically: a reader never sees half a file)."""
        if self.sink is None:
            return
        self.sink.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.sink.with_suffix(self.sink.suffix + ".tmp")
        tmp.write_text(json.dumps(self.record() | {"complete": complete}, indent=2, default=str) + "\n")
        tmp.replace(self.sink)

    def time(self, name: str, fn: Callable[[], Any], repeat: int = 3, warmup: int = 0) -> Timing:
        """Run ``fn`` ``warmup`` + ``repeat`` times; keep the ``repeat`` timed runs; print one line."""
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return self.add_timing(name, times)

    def add_timing(self, name: str, times: list[float] | tuple[float, ...]) -> Timing:
        """A timing measured by the bench itself (a whole subprocess, a training loop's own clock)."""
        if not times:
            raise ValueError(f"timing {name!r} has no runs")
        timing = Timing(name, tuple(float(t) for t in times))
        self.timings[name] = timing
        self.save()
        print(
            f"{name}: min {timing.best:.4f} s, median {timing.median:.4f} s ({len(times)} runs)",
            flush=True,
        )
        return timing

    def ratio(self, name: str, ours: Timing | float, baseline: Timing | float) -> float:
        """``ours / baseline`` (times: below 1 is faster; rates go in as floats), recorded and printed."""
        num = ours.best if isinstance(ours, Timing) else float(ours)
        den = baseline.best if isinstance(baseline, Timing) else float(baseline)
        if den == 0:
            raise ValueError(f"ratio {name!r}: the baseline is 0")
        value = num / den
        self.ratios[name] = value
        self.save()
        print(f"{name}: {value:.3f}x", flush=True)
        return value

    def figure(self, name: str, value: Any) -> None:
        """Any other measured figure (tokens/s, MFU, accuracy, peak memory), recorded as it is."""
        self.figures[name] = value
        self.save()

    def record(self) -> dict[str, Any]:
        return {
            "bench": self.name,
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": [sys.executable, *sys.argv],
            "args": self.args,
            "machine": machine(),
            "timings": {k: t.as_dict() for k, t in self.timings.items()},
            "ratios": self.ratios,
            "figures": self.figures,
        }


def parser(doc: str | None, extra: Extra | None = None, repeat: int | None = 3) -> argparse.ArgumentParser:
    """The shared arguments (``--repeat``, ``--quick``, ``--json``) plus the bench's own.

    ``repeat`` is ``--repeat``'s default: a bench whose default depends on ``--quick`` passes None
    and picks its own when the argument is left out.
    """
    first = (doc or "").strip().splitlines()[0] if doc else None
    p = argparse.ArgumentParser(description=first)
    shown = "the bench's own" if repeat is None else repeat
    p.add_argument("--repeat", type=int, default=repeat, help=f"timed runs per measurement (default {shown})")
    p.add_argument("--quick", action="store_true", help="the small size `make bench` runs")
    p.add_argument("--json", type=Path, default=None, help="write the run's record here")
    if extra is not None:
        extra(p)
    return p


def main(
    run: Callable[[argparse.Namespace, Bench], Any],
    doc: str | None = None,
    extra: Extra | None = None,
    argv: list[str] | None = None,
    name: str | None = None,
    repeat: int | None = 3,
) -> dict[str, Any]:
    """Parse the arguments, print the machine, run the bench, write and return its record."""
    args = parser(doc, extra, repeat).parse_args(argv)
    bench_name = name or Path(sys.argv[0]).stem
    bench = Bench(
        bench_name, {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, sink=args.json
    )
    info = machine()
    gpu = info["gpu"]["name"] if info.get("gpu") else "no GPU"
    print(f"{bench_name} on {info['cpu']} ({info['cores']} cores), {gpu}", flush=True)
    bench.save()  # the record exists from the start: a part cut before its first figure says so
    run(args, bench)
    record = bench.record() | {"complete": True}
    if args.json is not None:
        bench.save(complete=True)
        print(f"record: {args.json}", flush=True)
    return record
