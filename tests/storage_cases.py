"""Storage behaviours shared by the local and the S3 (moto) test modules."""

from __future__ import annotations

import pytest

import schemas
from coa import io
from coa.io import ArtifactError, Store


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

    real = io._write_json

    def crash(fs, path, value):  # the manifest is the commit point: die right before it
        if path.endswith(io.MANIFEST):
            raise KeyboardInterrupt("killed between write and commit")
        real(fs, path, value)

    monkeypatch.setattr(io, "_write_json", crash)
    with pytest.raises(KeyboardInterrupt):
        writer.commit()
    monkeypatch.setattr(io, "_write_json", real)

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
