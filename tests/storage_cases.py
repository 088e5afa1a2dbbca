"""Storage behaviours shared by the local and the S3 (moto) test modules."""

from __future__ import annotations

import pytest

import schemas
from coa import io
from coa.io import ArtifactError, Store
from coa.io import writer as io_writer


def tasks_table(n: int = 3):
    return schemas.TASK.from_rows(
        [
            {
                "task_id": f"s:{i}",
                "source": "s",
                "family": "math",
                "question": f"{i}+1?",
                "gold_answers": [str(i + 1)],
                "source_index": i,
                "metadata": "{}",
            }
            for i in range(n)
        ]
    )


def write_tasks(store: Store, config: dict, n: int = 3) -> io.ArtifactRef:
    writer = store.writer("tasks", "t", config)
    assert writer.existing() is None
    writer.write_table("tasks", tasks_table(n), schemas.TASK)
    return writer.commit()


def check_roundtrip_and_reuse(store: Store) -> None:
    ref = write_tasks(store, {"a": 1})
    assert ref.uri.startswith(store.root) and "/tasks/t-" in ref.uri
    assert io.read_table(ref.uri).to_pylist() == tasks_table().to_pylist()
    assert sum(b.num_rows for b in io.iter_batches(ref.uri, batch_rows=2)) == 3
    again = store.writer("tasks", "t", {"a": 1})
    assert again.existing() == ref  # same inputs: the committed artifact is reused
    other = store.writer("tasks", "t", {"a": 2})
    assert other.uri != ref.uri and other.existing() is None
    lineage = io.read_lineage(ref.uri)
    assert lineage["config"] == {"a": 1} and lineage["content_hash"] == ref.content_hash
    assert lineage["code_version"] and lineage["created_at"]


def check_crash_between_write_and_commit(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    good = write_tasks(store, {"v": "good"})
    writer = store.writer("tasks", "t", {"v": "crash"})
    writer.write_table("tasks", tasks_table(5), schemas.TASK)

    real = io_writer._write_json  # the commit reads it from coa.io.writer: patched there

    def crash(fs, path, value):  # the manifest is the commit point: die right before it
        if path.endswith(io.MANIFEST):
            raise KeyboardInterrupt("killed between write and commit")
        real(fs, path, value)

    monkeypatch.setattr(io_writer, "_write_json", crash)
    with pytest.raises(KeyboardInterrupt):
        writer.commit()
    monkeypatch.setattr(io_writer, "_write_json", real)

    assert io.lookup(writer.uri) is None  # the data files exist, but nothing is committed
    with pytest.raises(ArtifactError, match="never committed"):
        io.read_table(writer.uri)
    assert io.read_table(good.uri).num_rows == 3  # earlier committed work is untouched
    # a rerun rebuilds the uncommitted address from scratch and commits it
    rerun = store.writer("tasks", "t", {"v": "crash"})
    assert rerun.existing() is None
    rerun.write_table("tasks", tasks_table(5), schemas.TASK)
    ref = rerun.commit()
    assert io.read_table(ref).num_rows == 5
    fs, path = io.filesystem(ref.uri)
    leftovers = [p for p in fs.ls(path, detail=False) if io.STAGING_PREFIX in p]
    assert leftovers == []


def check_contract_violation_commits_nothing(store: Store) -> None:
    writer = store.writer("tasks", "t", {"v": "bad"})
    bad = tasks_table().drop_columns(["question"])
    with pytest.raises(schemas.ContractError, match="'question': missing"), writer:
        writer.write_table("tasks", bad, schemas.TASK)
    assert io.lookup(writer.uri) is None


def recommit_file(ref: io.ArtifactRef, relpath: str, table) -> None:
    """Replace a committed table file *and* its manifest entry (an artifact a bug or an older code
    version committed like this): what the contract check, not the integrity check, must catch."""
    import json

    import pyarrow.parquet as pq

    fs, path = io.filesystem(ref.uri)
    with fs.open(f"{path}/{relpath}", "wb") as fh:
        pq.write_table(table, fh)
    manifest = json.loads(fs.cat_file(f"{path}/{io.MANIFEST}"))
    manifest["files"][relpath] = io._sha256(fs, f"{path}/{relpath}")
    manifest["sizes"][relpath] = fs.size(f"{path}/{relpath}")
    with fs.open(f"{path}/{io.MANIFEST}", "wb") as fh:
        fh.write(json.dumps(manifest).encode())
    io._MANIFESTS.pop((ref.uri, ref.content_hash), None)


def check_damage_is_detected_moved_aside_and_rebuilt(store: Store) -> None:
    """A committed table whose bytes changed is refused on reuse and on read, named, moved aside."""
    ref = write_tasks(store, {"v": "damage"})
    fs, path = io.filesystem(ref.uri)
    data = bytearray(fs.cat_file(f"{path}/tasks.parquet"))
    data[len(data) // 2] ^= 0xFF  # one flipped byte, same size: only the sha256 tells
    fs.pipe_file(f"{path}/tasks.parquet", bytes(data))
    writer = store.writer("tasks", "t", {"v": "damage"})
    with pytest.raises(
        io.IntegrityError, match=r"file tasks\.parquet of artifact .*moved aside to .*/damaged/"
    ):
        writer.existing()
    assert io.lookup(ref.uri) is None  # moved aside: the next run rebuilds it
    rebuilt = write_tasks(store, {"v": "damage"})
    assert rebuilt.uri == ref.uri and io.read_table(rebuilt).num_rows == 3
    fs.pipe_file(f"{path}/tasks.parquet", bytes(data[: len(data) // 2]))  # truncated: the size tells
    with pytest.raises(io.IntegrityError, match="bytes, the manifest says"):
        io.read_table(rebuilt)


def check_torn_manifest_reads_as_uncommitted(store: Store) -> None:
    ref = write_tasks(store, {"v": "torn"})
    fs, path = io.filesystem(ref.uri)
    fs.pipe_file(f"{path}/{io.MANIFEST}", b'{"uri": "')  # a crash while it was written
    assert io.lookup(ref.uri) is None
    again = write_tasks(store, {"v": "torn"})  # rebuilt, not a JSONDecodeError
    assert again.uri == ref.uri and io.read_table(again).num_rows == 3


def check_second_writer_reuses_the_first(store: Store) -> None:
    """Two writers of one key that both staged: the first commit wins, the second commits nothing of
    its own (on a local root it waits for the first at its first write, then finds it committed)."""
    first = store.writer("tasks", "t", {"v": "race"})
    first.write_table("tasks", tasks_table(3), schemas.TASK)
    second = store.writer("tasks", "t", {"v": "race"})
    fs, _ = io.filesystem(first.uri)
    if "file" in str(fs.protocol) or "local" in str(fs.protocol):
        import threading

        done: list[object] = []
        racer = threading.Thread(target=lambda: done.append(_write_or_error(second)))
        racer.start()
        racer.join(0.5)
        assert racer.is_alive()  # the second writer waits on the address's lock
        ref = first.commit()
        racer.join(30)
        assert isinstance(done[0], ArtifactError) and "already committed" in str(done[0])
    else:  # object store: no lock; the second writer's commit finds the first's manifest and reuses it
        second.write_table("tasks", tasks_table(3), schemas.TASK)
        ref = first.commit()
        assert second.commit() == ref
    assert io.read_table(ref).num_rows == 3 and io.lookup(ref.uri) == ref


def _write_or_error(writer: io.ArtifactWriter) -> object:
    try:
        writer.write_table("tasks", tasks_table(3), schemas.TASK)
    except ArtifactError as e:
        return e
    return writer.commit()
