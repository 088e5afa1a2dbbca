"""Local content-addressed storage: commit protocol, reuse, crash safety, lineage, secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import schemas
from coa import io
from coa.io import ArtifactError, Store
from tests import storage_cases as cases


def test_roundtrip_and_reuse(storage_root: Path) -> None:
    cases.check_roundtrip_and_reuse(Store())


def test_crash_between_write_and_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    cases.check_crash_between_write_and_commit(Store(), monkeypatch)


def test_contract_violation_commits_nothing() -> None:
    cases.check_contract_violation_commits_nothing(Store())


def test_address_depends_on_config_upstream_and_code(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store()
    up = cases.write_tasks(store, {"a": 1})
    base, _ = store.address("x", "n", {"k": 1}, [up])
    assert store.address("x", "n", {"k": 1}, [up])[0] == base
    assert store.address("x", "n", {"k": 2}, [up])[0] != base
    assert store.address("x", "n", {"k": 1}, [])[0] != base
    assert store.address("x", "n", {"k": 1}, [up], version="other")[0] != base


def test_committed_artifact_cannot_be_overwritten() -> None:
    store = Store()
    ref = cases.write_tasks(store, {"a": 1})
    writer = store.writer("tasks", "t", {"a": 1})
    with pytest.raises(ArtifactError, match="already committed"):
        writer.write_table("tasks", cases.tasks_table(), schemas.TASK)
    assert io.read_table(ref).num_rows == 3


def test_reader_uses_only_manifest_files(tmp_path: Path) -> None:
    store = Store()
    ref = cases.write_tasks(store, {"a": 1})
    stray = cases.tasks_table(7)
    pq.write_table(stray, Path(ref.uri) / "tasks-stray.parquet")  # e.g. a half-written retry
    assert io.read_table(ref).num_rows == 3


def test_read_rejects_a_corrupted_table_by_contract(tmp_path: Path) -> None:
    store = Store()
    ref = cases.write_tasks(store, {"a": 1})
    cases.recommit_file(ref, "tasks.parquet", cases.tasks_table().drop_columns(["family"]))
    with pytest.raises(schemas.ContractError, match="'family': missing"):
        io.read_table(ref)


def test_a_read_of_some_columns_reads_and_checks_only_those(tmp_path: Path) -> None:
    store = Store()
    ref = cases.write_tasks(store, {"a": 1})
    whole = io.read_table(ref)
    part = io.read_table(ref, columns=["family", "task_id"])
    assert part.column_names == ["family", "task_id"] and part.equals(whole.select(["family", "task_id"]))
    # a file missing a column the read does not ask for is fine; a missing nullable one is filled
    cases.recommit_file(ref, "tasks.parquet", cases.tasks_table().drop_columns(["question", "test_cases"]))
    read = io.read_table(ref, columns=["task_id", "test_cases"])
    assert read.column("task_id").to_pylist() == whole.column("task_id").to_pylist()
    assert read.column("test_cases").null_count == read.num_rows
    with pytest.raises(schemas.ContractError, match="'question': missing"):
        io.read_table(ref, columns=["question"])


def test_lineage_never_holds_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-very-secret-value")
    store = Store()
    writer = store.writer(
        "tasks", "t", {"endpoint": "http://x", "api_key": "inline", "note": "sk-test-very-secret-value"}
    )
    writer.write_table("tasks", cases.tasks_table(), schemas.TASK)
    ref = writer.commit()
    text = json.dumps(io.read_lineage(ref))
    assert "sk-test-very-secret-value" not in text and "inline" not in text
    assert io.read_lineage(ref)["config"]["endpoint"] == "http://x"


def test_extra_files_and_primary_table() -> None:
    store = Store()
    writer = store.writer("report", "r", {})
    writer.write_table("tasks", cases.tasks_table(), schemas.TASK)
    writer.write_table("quarantine", schemas.QUARANTINE.empty_table(), schemas.QUARANTINE)
    writer.write_file("report/summary.md", "# hi")
    ref = writer.commit()
    assert ref.primary_table == "tasks" and ref.rows("quarantine") == 0
    assert io.read_file(ref, "report/summary.md") == b"# hi"
    with pytest.raises(ArtifactError, match="has no file"):
        io.read_file(ref, "nope.md")
    with pytest.raises(ArtifactError, match="invalid artifact file name"):
        store.writer("report", "r2", {}).write_file("../escape", "x")


def test_missing_artifact_message() -> None:
    with pytest.raises(ArtifactError, match="no artifact at"):
        io.open_artifact("/nonexistent/place")


def test_path_fingerprint_tracks_content(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_text('{"q": 1}\n')
    first = io.path_fingerprint(str(f))
    f.write_text('{"q": 2}\n')
    assert io.path_fingerprint(str(f)) != first
    assert len(io.path_fingerprint(str(tmp_path))) == 64
    with pytest.raises(FileNotFoundError, match="input not found"):
        io.path_fingerprint(str(tmp_path / "missing"))


@pytest.mark.parametrize(("group_rows", "batch_rows"), [(1500, 1000), (1000, 1000), (700, 1000), (2000, 300)])
def test_file_batches_are_the_readers_batches_one_row_group_at_a_time(
    tmp_path: Path, group_rows: int, batch_rows: int
) -> None:
    table = pa.table({"x": list(range(4500)), "s": [f"v{i}" for i in range(4500)]})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=group_rows)
    source = pq.ParquetFile(tmp_path / "t.parquet")
    expected = [pa.Table.from_batches([b]) for b in source.iter_batches(batch_size=batch_rows)]
    got = list(io.file_batches(source, batch_rows))
    assert [t.num_rows for t in got] == [t.num_rows for t in expected]
    assert all(g.equals(e) for g, e in zip(got, expected, strict=True))
    assert pa.concat_tables(got).equals(table)


def test_damage_is_detected_moved_aside_and_rebuilt() -> None:
    cases.check_damage_is_detected_moved_aside_and_rebuilt(Store())


def test_torn_manifest_reads_as_uncommitted() -> None:
    cases.check_torn_manifest_reads_as_uncommitted(Store())


def test_a_second_writer_of_the_same_key_reuses_the_first() -> None:
    cases.check_second_writer_reuses_the_first(Store())


def test_the_manifest_is_written_under_a_temporary_name_then_renamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit point is a rename: a crash while the manifest is written leaves no torn manifest."""
    import os

    renames: list[tuple[str, str]] = []
    real = os.replace

    def spy(src: str, dst: str) -> None:
        renames.append((os.path.basename(src), os.path.basename(dst)))
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    ref = cases.write_tasks(Store(), {"v": "rename"})
    assert [dst for _, dst in renames] == [io.LINEAGE, io.MANIFEST]
    assert all(src.startswith(".tmp-") for src, _ in renames)
    assert sorted(p.name for p in Path(ref.uri).iterdir()) == sorted([*ref.files, io.LINEAGE, io.MANIFEST])
