"""Damaged committed artifacts: a truncated table, 16 flipped bytes, a valid Parquet file with one
answer changed, a torn manifest. Each is detected before the artifact is reused or read, named in a
one-line error (the file and the artifact), moved aside, and rebuilt by the next run.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coa import io
from tests.faults.conftest import record
from tests.faults.harness import CONFIG, TASKS, cli, in_repo

TABLE = "trajectories.parquet"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str], list[str]]]:
    """A store with a task set, and the collect and curate command lines over it."""
    root = tmp_path_factory.mktemp("integrity") / "store"
    with in_repo():
        code, out, err = cli(root, "tasks", "synthetic", "-c", CONFIG, *TASKS)
        assert code == 0, err
        tasks = out.strip().splitlines()[-1]
        collect = ["collect", "--tasks", tasks, "--table", "train", "-c", CONFIG, "collect.concurrency=4"]
        curate = ["curate", "--tasks", tasks, "--table", "train", "-c", CONFIG, "curate.gate.enabled=false"]
        yield root, collect, curate


def _collect(root: Path, args: list[str]) -> tuple[Path, str]:
    code, out, err = cli(root, *args)
    assert code == 0, err[-2000:]
    return Path(out.split("trajectories: ", 1)[1].split()[0]), err


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


def _rewrite_one_answer(path: Path) -> None:
    table = pq.read_table(path)
    answers = table.column("final_answer").to_pylist()
    answers[0] = "a different answer"
    index = table.column_names.index("final_answer")
    import pyarrow as pa

    table = table.set_column(index, "final_answer", pa.array(answers, table.schema.field(index).type))
    pq.write_table(table, path, compression="zstd")  # a valid Parquet file the reader would accept


DAMAGE = {
    "truncated": _truncate,
    "16 bytes flipped": _flip,
    "rewritten, one answer changed": _rewrite_one_answer,
}


@pytest.mark.parametrize(
    ("reader", "damage"),
    [*(("curate reads it", d) for d in DAMAGE), ("collect reuses it", "16 bytes flipped")],
)
def test_a_damaged_table_is_named_moved_aside_and_rebuilt(
    store: tuple[Path, list[str], list[str]], damage: str, reader: str
) -> None:
    root, collect, curate = store
    with in_repo():
        raw, _ = _collect(root, collect)
        shutil.rmtree(root / "curated", ignore_errors=True)  # curate must read its input, not reuse
        DAMAGE[damage](raw / TABLE)
        args = [*curate, "--raw", str(raw)] if reader.startswith("curate") else collect
        code, _, err = cli(root, *args)
        line = _one_line(err)
        named = code == 1 and f"file {TABLE} of artifact {raw}" in line and "moved aside" in line
        aside = not raw.exists() and any((root / io.DAMAGED_DIR / "trajectories").iterdir())
        rebuilt, how = _collect(root, collect)  # the next run rebuilds the damaged step
        code_after, _, err_after = cli(root, *curate, "--raw", str(rebuilt))
    survived = (
        named and aside and rebuilt == raw and "built" in how and "reused" not in how and code_after == 0
    )
    record("collect", f"table {damage}", survived)
    assert code == 1 and named, line
    assert aside and rebuilt == raw and "reused" not in how, how
    assert code_after == 0, err_after


@pytest.mark.parametrize("torn", [b"", b'{"uri": "/x", "kind": "traj'])
def test_a_torn_manifest_reads_as_uncommitted_and_is_rebuilt(
    store: tuple[Path, list[str], list[str]], torn: bytes
) -> None:
    root, collect, _ = store
    with in_repo():
        raw, _ = _collect(root, collect)
        (raw / io.MANIFEST).write_bytes(torn)
        assert io.lookup(str(raw)) is None
        code, out, err = cli(root, *collect)
    ok = code == 0 and "built" in err and json.loads((raw / io.MANIFEST).read_text())["files"]
    record("collect", "torn manifest", bool(ok))
    assert code == 0 and "built" in err, err[-2000:]
    assert io.lookup(str(raw)) is not None and io.read_table(str(raw)).num_rows == 16


def test_validate_reports_the_damaged_file(store: tuple[Path, list[str], list[str]]) -> None:
    root, collect, _ = store
    with in_repo():
        raw, _ = _collect(root, collect)
        _truncate(raw / TABLE)
        code, out, err = cli(root, "validate", str(raw))
        assert code == 1 and "corrupt" in out and TABLE in out, out + err
        assert "Traceback" not in out + err
        assert raw.exists()  # validate reports, it moves nothing
        (raw / io.MANIFEST).unlink()  # leave the next test a store that rebuilds
