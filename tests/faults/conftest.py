"""The fault tier (marker ``faults``): SIGKILL, damaged artifacts, a full disk, concurrent runs, and
the store on S3 under HTTP 500s, throttling and killed writers (stage ``s3 …``).

Every test here injects faults into real stage runs (``python -m coa.cli …`` subprocesses or the CLI
in process) and records each one with :func:`record`: the stage, the kind of fault and whether the
promise held (same content key and contents after a rerun, damage detected and rebuilt, nothing
committed on a full disk, one artifact from two identical commands). At the end of the session a
table of faults injected and survived per stage and fault kind is printed
(:func:`pytest_terminal_summary`). Run it alone: ``python -m pytest -q tests/faults``.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

_TALLY: collections.Counter[tuple[str, str, str]] = collections.Counter()
HERE = Path(__file__).resolve().parent


def record(stage: str, kind: str, survived: bool) -> None:
    """Count one injected fault and whether the store's promise held after it."""
    _TALLY[(stage, kind, "injected")] += 1
    if survived:
        _TALLY[(stage, kind, "survived")] += 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.faults)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    rows = sorted({(stage, kind) for stage, kind, _ in _TALLY})
    if not rows:
        return
    tr = terminalreporter
    tr.section("fault campaign")
    tr.write_line(f"{'stage':<12} {'fault':<52} {'injected':>8} {'survived':>8}")
    for stage, kind in rows:
        injected, survived = _TALLY[(stage, kind, "injected")], _TALLY[(stage, kind, "survived")]
        tr.write_line(f"{stage:<12} {kind:<52} {injected:>8} {survived:>8}")
    total = sum(v for (_, _, what), v in _TALLY.items() if what == "injected")
    held = sum(v for (_, _, what), v in _TALLY.items() if what == "survived")
    tr.write_line(f"total: {total} faults injected, {held} survived, {total - held} failed")
