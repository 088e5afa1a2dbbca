"""Task-set import: benchmark files and local datasets → ``task.v1`` rows + a ``quarantine.v1``.

:func:`import_tasks` reads each configured source, recognises its layout from the file type and
its keys/columns (never from the file name), turns every row into a ``task.v1`` row or a
quarantine row with a reason code, and returns both tables with a per-source summary. Layouts
(``<rows>/<container>``, see :func:`detect_layout`):

* containers: ``json`` (a JSON list of objects; a ``.json`` file that is really JSON Lines is read
  as such), ``jsonl``, ``parquet``, and ``hf_dataset`` (a folder written by
  ``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``; every split is read and its
  name kept in the metadata as ``hf_split``);
* ``afm_web``: the AFM web benchmarks (GAIA, WebWalker, BrowseComp, HLE): a JSON list of
  objects with ``question`` and a string ``answer`` (or, in any container, GAIA/WebWalker marker
  keys); family ``web``; native id ``task_id`` or ``id``; every other key goes to the metadata;
* ``mhqa``: the AFM multi-hop QA files: ``question`` with a *list* ``answer`` (JSON Lines, or any
  container with a ``data_source`` column); family ``mhqa``; the list is the gold answers;
* ``afm_rl``: the AFM code/math RL Parquet files (``data_source``, ``prompt`` chat messages,
  ``ability``, ``reward_model{ground_truth, style}``, ``extra_info``), where ``prompt``,
  ``reward_model`` and ``extra_info`` may be nested values, JSON strings or Python-repr strings.
  A ground truth holding ``stdin``/``expected_output`` or ``functional`` tests makes a ``code``
  task (tests in ``test_cases``, no gold answers), anything else a ``math`` task whose gold answer
  is the ground truth. The question is the user message after its last line-start ``Task:``
  marker, without the code answer-format tails (starter code goes to ``test_cases``);
* ``plain``: any container with a question column (``question``, ``problem`` or a string
  ``prompt``) and an answer column (``answer``, ``answers`` or ``gold_answers``; string or list),
  or a ``test_cases`` column for code. The family comes from the source config, else from a
  ``family`` column; with neither, :class:`TaskImportError` asks the user to set ``family``.

A family set in the source config overrides the family a layout implies (an ``afm_rl`` row whose
ground truth contradicts it is quarantined as ``family_mismatch``).

Task ids are ``<source>:<native id or row number>``; source names are the configured ``name`` or
the file stem, made unique within one import with ``-2``, ``-3`` … suffixes. Rows that cannot be
used are quarantined (stage ``tasks.import``) with a reason code, a detail and the original row,
never dropped: for every source ``rows_read == rows_ok + rows_quarantined``. Reason codes:
``missing_question``, ``empty_question``, ``missing_answer``, ``missing_tests``,
``bad_ground_truth``, ``bad_prompt``, ``bad_extra_info``, ``bad_test_cases``, ``bad_family``,
``family_mismatch``, ``duplicate_id``, ``bad_text`` (not valid Unicode) and ``bad_row`` (a line
that is not a JSON object, or a row that cannot be converted). ``limit`` stops reading after the
first N usable rows; the rest are counted in ``rows_skipped_by_limit``. An input that cannot
be read at all raises :class:`TaskImportError` naming the path, the problem and the fix, and
nothing is returned.

Reading containers is :mod:`coa.tasksets.containers`, layout detection and row conversion
:mod:`coa.tasksets.layouts`, the quarantine rows :mod:`coa.tasksets.quarantine`; this module runs
them over each source and keeps the accounting.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

import schemas
from coa.tasksets.config import TaskSourceConfig
from coa.tasksets.containers import RawRow, TaskImportError, dumps, fail, open_source
from coa.tasksets.layouts import (
    NeedsFamily,
    ParsedTask,
    Reject,
    convert_afm_rl,
    convert_qa,
    detect_row_layout,
)
from coa.tasksets.quarantine import STAGE, is_utf8, payload_text, safe_text
from schemas.task import FAMILIES

__all__ = ["ImportResult", "ProgressFn", "SourceSummary", "TaskImportError", "detect_layout", "import_tasks"]

ProgressFn = Callable[[str, int, int], None]


@dataclasses.dataclass(frozen=True)
class SourceSummary:
    """What one source contributed: ``rows_read == rows_ok + rows_quarantined`` always holds."""

    name: str
    path: str
    layout: str
    rows_read: int
    rows_ok: int
    rows_quarantined: int
    rows_skipped_by_limit: int = 0


@dataclasses.dataclass(frozen=True)
class ImportResult:
    """The imported tasks (``task.v1``), the rejected rows (``quarantine.v1``) and per-source counts."""

    tasks: pa.Table
    quarantine: pa.Table
    sources: tuple[SourceSummary, ...]


# -- public entry points ---------------------------------------------------------------------


def detect_layout(path: str) -> str:
    """The layout of ``path`` as ``'<rows>/<container>'``, e.g. ``'afm_rl/parquet'``.

    Raises :class:`TaskImportError` when the input cannot be read or has no known layout.
    """
    src = open_source(path)
    return f"{detect_row_layout(path, src)}/{src.container}"


def import_tasks(sources: Sequence[TaskSourceConfig], progress: ProgressFn | None = None) -> ImportResult:
    """Import every source into one ``task.v1`` table plus a ``quarantine.v1`` table.

    ``progress(source_name, done, total)`` is called as rows are processed (``total`` is the row
    count of the source). Any unreadable source raises :class:`TaskImportError`; nothing is
    returned then.
    """
    now = dt.datetime.now(dt.UTC)
    tasks: list[dict[str, Any]] = []
    rejects: list[dict[str, Any]] = []
    summaries: list[SourceSummary] = []
    used_names: set[str] = set()
    for cfg in sources:
        name = _unique_name(cfg.name or _stem(cfg.path), used_names)
        used_names.add(name)
        summary, ok_rows, bad_rows = _import_one(cfg, name, progress, now)
        tasks.extend(ok_rows)
        rejects.extend(bad_rows)
        summaries.append(summary)
    return ImportResult(
        tasks=schemas.TASK.from_rows(tasks),
        quarantine=schemas.QUARANTINE.from_rows(rejects),
        sources=tuple(summaries),
    )


# -- one source ------------------------------------------------------------------------------


def _import_one(
    cfg: TaskSourceConfig, name: str, progress: ProgressFn | None, now: dt.datetime
) -> tuple[SourceSummary, list[dict[str, Any]], list[dict[str, Any]]]:
    path = cfg.path
    src = open_source(path)
    row_layout = detect_row_layout(path, src)
    layout = f"{row_layout}/{src.container}"
    if (
        row_layout == "plain"
        and cfg.family is None
        and not any(r.get("family") in FAMILIES for r in src.sample)
    ):
        raise _needs_family(path, layout)
    family = cfg.family
    ok_rows: list[dict[str, Any]] = []
    bad_rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    read = 0
    step = max(1, src.total // 50)
    if progress:
        progress(name, 0, src.total)
    for raw in src.rows():
        if cfg.limit is not None and len(ok_rows) >= cfg.limit:
            break
        read += 1
        result = _convert(raw, row_layout, src.keys, family, path, layout)
        local = result.native_id if result.native_id is not None else str(raw.index)
        if src.has_splits and raw.split is not None:
            local = f"{raw.split}/{local}"
        task_id = f"{name}:{local}"
        task_row: dict[str, Any] | None = None
        if isinstance(result, ParsedTask):
            if task_id in seen:
                result = Reject("duplicate_id", f"id {local!r} already used by an earlier row of this source")
            else:
                task_row = _task_row(result, task_id, name, raw)
                if not is_utf8(task_row):
                    result = Reject(
                        "bad_text", "the row holds text that is not valid Unicode (lone surrogates)"
                    )
        if isinstance(result, ParsedTask) and task_row is not None:
            seen.add(task_id)
            ok_rows.append(task_row)
        else:
            assert isinstance(result, Reject)
            bad_rows.append(
                {
                    "stage": STAGE,
                    "source": path,
                    "row_key": safe_text(task_id),
                    "reason": result.reason,
                    "detail": safe_text(f"row {raw.index}: {result.detail}"),
                    "payload": payload_text(raw),
                    "quarantined_at": now,
                }
            )
        if progress and read % step == 0:
            progress(name, read, src.total)
    if progress:
        progress(name, src.total, src.total)
    assert read == len(ok_rows) + len(bad_rows), f"{path}: row accounting broken"
    summary = SourceSummary(
        name=name,
        path=path,
        layout=layout,
        rows_read=read,
        rows_ok=len(ok_rows),
        rows_quarantined=len(bad_rows),
        rows_skipped_by_limit=src.total - read,
    )
    return summary, ok_rows, bad_rows


def _convert(
    raw: RawRow, row_layout: str, keys: frozenset[str], family: str | None, path: str, layout: str
) -> ParsedTask | Reject:
    if raw.row is None:
        return Reject("bad_row", f"the row is {raw.problem}")
    try:
        if row_layout == "afm_rl":
            return convert_afm_rl(raw.row, family)
        return convert_qa(raw.row, row_layout, keys, family)
    except NeedsFamily:
        raise _needs_family(path, layout) from None
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # an odd row must not end the import
        return Reject("bad_row", f"cannot convert the row ({type(e).__name__}: {e})")


def _needs_family(path: str, layout: str) -> TaskImportError:
    return fail(
        path,
        f"layout {layout} does not say which task family its rows are",
        f"Set `family` ({'|'.join(FAMILIES)}) on this source (tasks.sources[].family in the config, "
        "or --family on `coa tasks import`)",
    )


# -- helpers ---------------------------------------------------------------------------------


def _stem(path: str) -> str:
    base = posixpath.basename(path.replace("\\", "/").rstrip("/")) or "tasks"
    return posixpath.splitext(base)[0] if "." in base[1:] else base


def _unique_name(name: str, used: set[str]) -> str:
    if name not in used:
        return name
    n = 2
    while f"{name}-{n}" in used:
        n += 1
    return f"{name}-{n}"


def _task_row(task: ParsedTask, task_id: str, name: str, raw: RawRow) -> dict[str, Any]:
    metadata = dict(task.metadata)
    if raw.split is not None:
        metadata["hf_split"] = raw.split
    return {
        "task_id": task_id,
        "source": name,
        "family": task.family,
        "question": task.question,
        "gold_answers": task.gold_answers,
        "test_cases": task.test_cases,
        "source_index": raw.index,
        "metadata": dumps(metadata),
    }
