"""Task-set import, reading containers: a file or folder → rows, whatever the container.

:func:`open_source` recognises the container from the file type and its first bytes (never from the
file name alone): a JSON list of objects (a ``.json`` file that is really JSON Lines is read as such),
JSON Lines, Parquet, or a folder written by ``datasets``' ``save_to_disk`` (every split, its name kept).
It returns an :class:`OpenedSource`: the row count, a sample of rows and their keys (what the layout is
detected from, :mod:`coa.tasksets.layouts`) and a generator of :class:`RawRow` (a dict, or the raw
text of a line that is not a JSON object, which the importer quarantines). An input that cannot be
read at all raises :class:`TaskImportError` naming the path, the problem and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coa.errors import UserError

SAMPLE_ROWS = 100
"""Rows read ahead of the import to detect the layout."""


class TaskImportError(UserError, ValueError):
    """An input cannot be imported at all; the message names the path, the problem and the fix."""


@dataclasses.dataclass
class RawRow:
    """One input row: a dict, or the raw text of a line that is not a JSON object."""

    index: int
    row: dict[str, Any] | None
    raw: str | None = None
    split: str | None = None
    problem: str = ""


@dataclasses.dataclass
class OpenedSource:
    container: str
    total: int
    sample: list[dict[str, Any]]
    keys: frozenset[str]
    rows: Callable[[], Iterator[RawRow]]
    has_splits: bool = False


def fail(path: str, problem: str, fix: str) -> TaskImportError:
    return TaskImportError(f"{path}: {problem}. {fix}")


def _filesystem(path: str) -> tuple[Any, str]:
    from coa.io import filesystem  # fsspec: local paths and s3:// alike

    return filesystem(path)


def open_source(path: str) -> OpenedSource:
    fs, fpath = _filesystem(path)
    try:
        exists = fs.exists(fpath)
        isdir = exists and fs.isdir(fpath)
    except OSError as e:
        raise fail(path, f"cannot access the input ({e})", "Check the path and your permissions") from e
    if not exists:
        raise fail(
            path,
            "not found",
            "Check `path` in tasks.sources (relative paths resolve against the working directory)",
        )
    if isdir:
        return _open_hf_dataset(path, fs, fpath)
    suffix = posixpath.splitext(fpath)[1].lower()
    try:
        with fs.open(fpath, "rb") as fh:
            head = fh.read(4)
    except OSError as e:
        raise fail(path, f"cannot read the file ({e})", "Check the file and your permissions") from e
    if suffix == ".parquet" or (suffix not in (".json", ".jsonl") and head == b"PAR1"):
        return _open_parquet(path, fs, fpath)
    if suffix in (".json", ".jsonl", ".ndjson") or head.lstrip()[:1] in (b"[", b"{"):
        return _open_json(path, fs, fpath, suffix)
    if not head:
        raise fail(path, "the file is empty", "Point `path` at a file with task rows")
    raise fail(
        path,
        f"unsupported file type {suffix or '(no extension)'!r}",
        "Use a .json list of objects, a .jsonl file, a .parquet file, or a folder written by "
        "datasets' save_to_disk",
    )


def _open_json(path: str, fs: Any, fpath: str, suffix: str) -> OpenedSource:
    try:
        with fs.open(fpath, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise fail(path, f"cannot read the file ({e})", "Check the file and your permissions") from e
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise fail(path, f"is not UTF-8 text ({e})", "Re-save the file as UTF-8 JSON") from e
    if not text.strip():
        raise fail(path, "the file is empty", "Point `path` at a file with task rows")
    if suffix != ".jsonl" and suffix != ".ndjson":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if len(lines) > 1 and _first_line_is_object(lines[0]):
                return _jsonl_source(path, lines)  # e.g. Dataset.to_json writes JSON Lines to .json
            raise fail(
                path,
                f"is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
                "A .json task file must hold one JSON list of objects; use .jsonl for one object per line",
            ) from e
        if not isinstance(doc, list):
            raise fail(
                path,
                f"holds a JSON {type(doc).__name__}, not a list of task objects",
                "Write the tasks as a JSON list of objects ([{...}, {...}]) or as JSON Lines",
            )
        if not doc:
            raise fail(path, "holds an empty list (no rows)", "Point `path` at a file with task rows")
        return _list_source(path, doc)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return _jsonl_source(path, lines)


def _first_line_is_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _list_source(path: str, doc: list[Any]) -> OpenedSource:
    def rows() -> Iterator[RawRow]:
        for i, item in enumerate(doc):
            if isinstance(item, dict):
                yield RawRow(i, item)
            else:
                yield RawRow(i, None, raw=dumps(item), problem=f"a JSON {type(item).__name__}, not an object")

    sample = [r for r in doc[:SAMPLE_ROWS] if isinstance(r, dict)]
    if not sample:
        raise fail(
            path,
            "the JSON list holds no objects",
            "Each element must be a task object with at least a question and an answer",
        )
    return OpenedSource("json", len(doc), sample, _keys(sample), rows)


def _jsonl_source(path: str, lines: list[str]) -> OpenedSource:
    def parse(line: str) -> tuple[dict[str, Any] | None, str]:
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            return None, f"not valid JSON (column {e.colno}: {e.msg})"
        if not isinstance(value, dict):
            return None, f"a JSON {type(value).__name__}, not an object"
        return value, ""

    sample: list[dict[str, Any]] = []
    for line in lines:
        if len(sample) >= SAMPLE_ROWS:
            break
        value, _ = parse(line)
        if value is not None:
            sample.append(value)
    if not sample:
        raise fail(
            path,
            "no line is a JSON object (not JSON Lines)",
            'Write one JSON object per line, e.g. {"question": "...", "answer": "..."}',
        )

    def rows() -> Iterator[RawRow]:
        for i, line in enumerate(lines):
            value, problem = parse(line)
            yield RawRow(i, value, raw=None if value is not None else line, problem=problem)

    return OpenedSource("jsonl", len(lines), sample, _keys(sample), rows)


def _open_parquet(path: str, fs: Any, fpath: str) -> OpenedSource:
    def corrupt(e: Exception) -> TaskImportError:
        return fail(
            path,
            f"is not a readable Parquet file ({e})",
            "Re-export the file (e.g. pandas.DataFrame.to_parquet) or check that the download completed",
        )

    try:
        with fs.open(fpath, "rb") as fh:
            pf = pq.ParquetFile(fh)
            total = pf.metadata.num_rows
            columns = frozenset(pf.schema_arrow.names)
            first = next(pf.iter_batches(batch_size=SAMPLE_ROWS), None)
            sample = first.to_pylist() if first is not None else []
    except (pa.ArrowException, OSError, ValueError) as e:
        raise corrupt(e) from e
    if total == 0:
        raise fail(path, "the Parquet file has no rows", "Point `path` at a file with task rows")

    def rows() -> Iterator[RawRow]:
        i = 0
        try:
            with fs.open(fpath, "rb") as fh:
                for batch in pq.ParquetFile(fh).iter_batches(batch_size=1024):
                    for row in batch.to_pylist():
                        yield RawRow(i, row)
                        i += 1
        except (pa.ArrowException, OSError, ValueError) as e:
            raise corrupt(e) from e

    return OpenedSource("parquet", total, sample, columns, rows)


def _open_hf_dataset(path: str, fs: Any, fpath: str) -> OpenedSource:
    names = {posixpath.basename(p.rstrip("/")) for p in fs.ls(fpath, detail=False)}
    if not names & {"state.json", "dataset_dict.json"}:
        raise fail(
            path,
            "is a folder but not a Hugging Face `datasets` folder (no state.json or dataset_dict.json)",
            "Point `path` at a .json/.jsonl/.parquet file, or at a folder written by "
            "Dataset.save_to_disk / DatasetDict.save_to_disk",
        )
    try:
        import datasets

        from coa.settings import Settings

        loaded = datasets.load_from_disk(path, storage_options=Settings.from_env().storage_options(path))
    except Exception as e:  # datasets raises a wide range of errors for broken folders
        raise fail(
            path,
            f"cannot be loaded with datasets.load_from_disk ({type(e).__name__}: {e})",
            "Re-save the dataset with save_to_disk",
        ) from e
    has_splits = isinstance(loaded, datasets.DatasetDict)
    splits: list[tuple[str | None, Any]] = list(loaded.items()) if has_splits else [(None, loaded)]
    total = sum(ds.num_rows for _, ds in splits)
    if total == 0:
        raise fail(path, "the dataset has no rows", "Point `path` at a dataset with task rows")
    columns = frozenset(c for _, ds in splits for c in ds.column_names)
    sample: list[dict[str, Any]] = []
    for _, ds in splits:
        sample.extend(ds.select(range(min(SAMPLE_ROWS, ds.num_rows))).to_list())

    def rows() -> Iterator[RawRow]:
        i = 0
        for split, ds in splits:
            for batch in ds.iter(batch_size=1024):
                for values in zip(*batch.values(), strict=True):
                    yield RawRow(i, dict(zip(batch.keys(), values, strict=True)), split=split)
                    i += 1

    return OpenedSource("hf_dataset", total, sample, columns, rows, has_splits=has_splits)


def _keys(sample: list[dict[str, Any]]) -> frozenset[str]:
    return frozenset(k for row in sample for k in row)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
