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
"""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import json
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import schemas
from coa.errors import UserError
from coa.tasksets.config import TaskSourceConfig
from schemas.task import FAMILIES

STAGE = "tasks.import"
PAYLOAD_LIMIT = 100_000
SAMPLE_ROWS = 100

QUESTION_KEYS = ("question", "problem", "prompt")
ANSWER_KEYS = ("answer", "answers", "gold_answers")
ID_KEYS = ("task_id", "id", "question_id", "qid", "_id", "uid", "unique_id")
WEB_MARKER_KEYS = frozenset({"Annotator_Metadata", "root_url"})  # GAIA, WebWalker
EXTRA_INFO_DROPPED = frozenset({"tools_kwargs", "need_tools_kwargs", "starter_code", "metadata"})

ProgressFn = Callable[[str, int, int], None]


class TaskImportError(UserError, ValueError):
    """An input cannot be imported at all; the message names the path, the problem and the fix."""


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
    src = _open(path)
    return f"{_row_layout(path, src)}/{src.container}"


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


# -- reading containers ----------------------------------------------------------------------


@dataclasses.dataclass
class _Raw:
    """One input row: a dict, or the raw text of a line that is not a JSON object."""

    index: int
    row: dict[str, Any] | None
    raw: str | None = None
    split: str | None = None
    problem: str = ""


@dataclasses.dataclass
class _Source:
    container: str
    total: int
    sample: list[dict[str, Any]]
    keys: frozenset[str]
    rows: Callable[[], Iterator[_Raw]]
    has_splits: bool = False


def _fail(path: str, problem: str, fix: str) -> TaskImportError:
    return TaskImportError(f"{path}: {problem}. {fix}")


def _filesystem(path: str) -> tuple[Any, str]:
    from coa.io import filesystem  # fsspec: local paths and s3:// alike

    return filesystem(path)


def _open(path: str) -> _Source:
    fs, fpath = _filesystem(path)
    try:
        exists = fs.exists(fpath)
        isdir = exists and fs.isdir(fpath)
    except OSError as e:
        raise _fail(path, f"cannot access the input ({e})", "Check the path and your permissions") from e
    if not exists:
        raise _fail(
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
        raise _fail(path, f"cannot read the file ({e})", "Check the file and your permissions") from e
    if suffix == ".parquet" or (suffix not in (".json", ".jsonl") and head == b"PAR1"):
        return _open_parquet(path, fs, fpath)
    if suffix in (".json", ".jsonl", ".ndjson") or head.lstrip()[:1] in (b"[", b"{"):
        return _open_json(path, fs, fpath, suffix)
    if not head:
        raise _fail(path, "the file is empty", "Point `path` at a file with task rows")
    raise _fail(
        path,
        f"unsupported file type {suffix or '(no extension)'!r}",
        "Use a .json list of objects, a .jsonl file, a .parquet file, or a folder written by "
        "datasets' save_to_disk",
    )


def _open_json(path: str, fs: Any, fpath: str, suffix: str) -> _Source:
    try:
        with fs.open(fpath, "rb") as fh:
            data = fh.read()
    except OSError as e:
        raise _fail(path, f"cannot read the file ({e})", "Check the file and your permissions") from e
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _fail(path, f"is not UTF-8 text ({e})", "Re-save the file as UTF-8 JSON") from e
    if not text.strip():
        raise _fail(path, "the file is empty", "Point `path` at a file with task rows")
    if suffix != ".jsonl" and suffix != ".ndjson":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            if len(lines) > 1 and _first_line_is_object(lines[0]):
                return _jsonl_source(path, lines)  # e.g. Dataset.to_json writes JSON Lines to .json
            raise _fail(
                path,
                f"is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})",
                "A .json task file must hold one JSON list of objects; use .jsonl for one object per line",
            ) from e
        if not isinstance(doc, list):
            raise _fail(
                path,
                f"holds a JSON {type(doc).__name__}, not a list of task objects",
                "Write the tasks as a JSON list of objects ([{...}, {...}]) or as JSON Lines",
            )
        if not doc:
            raise _fail(path, "holds an empty list (no rows)", "Point `path` at a file with task rows")
        return _list_source(path, doc)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return _jsonl_source(path, lines)


def _first_line_is_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _list_source(path: str, doc: list[Any]) -> _Source:
    def rows() -> Iterator[_Raw]:
        for i, item in enumerate(doc):
            if isinstance(item, dict):
                yield _Raw(i, item)
            else:
                yield _Raw(i, None, raw=_dumps(item), problem=f"a JSON {type(item).__name__}, not an object")

    sample = [r for r in doc[:SAMPLE_ROWS] if isinstance(r, dict)]
    if not sample:
        raise _fail(
            path,
            "the JSON list holds no objects",
            "Each element must be a task object with at least a question and an answer",
        )
    return _Source("json", len(doc), sample, _keys(sample), rows)


def _jsonl_source(path: str, lines: list[str]) -> _Source:
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
        raise _fail(
            path,
            "no line is a JSON object (not JSON Lines)",
            'Write one JSON object per line, e.g. {"question": "...", "answer": "..."}',
        )

    def rows() -> Iterator[_Raw]:
        for i, line in enumerate(lines):
            value, problem = parse(line)
            yield _Raw(i, value, raw=None if value is not None else line, problem=problem)

    return _Source("jsonl", len(lines), sample, _keys(sample), rows)


def _open_parquet(path: str, fs: Any, fpath: str) -> _Source:
    def corrupt(e: Exception) -> TaskImportError:
        return _fail(
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
        raise _fail(path, "the Parquet file has no rows", "Point `path` at a file with task rows")

    def rows() -> Iterator[_Raw]:
        i = 0
        try:
            with fs.open(fpath, "rb") as fh:
                for batch in pq.ParquetFile(fh).iter_batches(batch_size=1024):
                    for row in batch.to_pylist():
                        yield _Raw(i, row)
                        i += 1
        except (pa.ArrowException, OSError, ValueError) as e:
            raise corrupt(e) from e

    return _Source("parquet", total, sample, columns, rows)


def _open_hf_dataset(path: str, fs: Any, fpath: str) -> _Source:
    names = {posixpath.basename(p.rstrip("/")) for p in fs.ls(fpath, detail=False)}
    if not names & {"state.json", "dataset_dict.json"}:
        raise _fail(
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
        raise _fail(
            path,
            f"cannot be loaded with datasets.load_from_disk ({type(e).__name__}: {e})",
            "Re-save the dataset with save_to_disk",
        ) from e
    has_splits = isinstance(loaded, datasets.DatasetDict)
    splits: list[tuple[str | None, Any]] = list(loaded.items()) if has_splits else [(None, loaded)]
    total = sum(ds.num_rows for _, ds in splits)
    if total == 0:
        raise _fail(path, "the dataset has no rows", "Point `path` at a dataset with task rows")
    columns = frozenset(c for _, ds in splits for c in ds.column_names)
    sample: list[dict[str, Any]] = []
    for _, ds in splits:
        sample.extend(ds.select(range(min(SAMPLE_ROWS, ds.num_rows))).to_list())

    def rows() -> Iterator[_Raw]:
        i = 0
        for split, ds in splits:
            for batch in ds.iter(batch_size=1024):
                for values in zip(*batch.values(), strict=True):
                    yield _Raw(i, dict(zip(batch.keys(), values, strict=True)), split=split)
                    i += 1

    return _Source("hf_dataset", total, sample, columns, rows, has_splits=has_splits)


def _keys(sample: list[dict[str, Any]]) -> frozenset[str]:
    return frozenset(k for row in sample for k in row)


# -- layouts ---------------------------------------------------------------------------------


def _row_layout(path: str, src: _Source) -> str:
    keys = src.keys
    if {"prompt", "reward_model"} <= keys:
        return "afm_rl"
    qkey = next((k for k in QUESTION_KEYS if k in keys), None)
    akey = next((k for k in ANSWER_KEYS if k in keys), None)
    if qkey is None or (akey is None and "test_cases" not in keys):
        raise _fail(
            path,
            f"unknown layout: columns {sorted(keys)[:20]}",
            "Expected a question column (question/problem/prompt) with an answer column "
            "(answer/answers/gold_answers), or the AFM RL columns (prompt, reward_model, extra_info)",
        )
    answers = [r.get(akey) for r in src.sample if akey and r.get(akey) is not None]
    list_answers = bool(answers) and all(isinstance(a, list) for a in answers)
    if keys & WEB_MARKER_KEYS or (src.container == "json" and qkey == "question" and not list_answers):
        return "afm_web"
    if qkey == "question" and list_answers and (src.container == "jsonl" or "data_source" in keys):
        return "mhqa"
    return "plain"


# -- per-row conversion ----------------------------------------------------------------------


@dataclasses.dataclass
class _Reject:
    reason: str
    detail: str
    native_id: str | None = None


@dataclasses.dataclass
class _Task:
    native_id: str | None
    family: str
    question: str
    gold_answers: list[str]
    test_cases: dict[str, Any] | None
    metadata: dict[str, Any]


class _NeedsFamily(Exception):
    """A row's layout does not fix its family and the source config names none."""


class _Targets(list[str]):
    """Gold answers from an AFM web/MHQA RL ground truth (``{"target": …}``): no family implied."""


def _native_id(row: Mapping[str, Any], keys: Sequence[str] = ID_KEYS) -> str | None:
    for k in keys:
        v = row.get(k)
        if v is not None and not isinstance(v, dict | list) and str(v).strip():
            return str(v)
    return None


def _gold(value: Any) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    return [str(v) for v in items if v is not None and str(v).strip()]


def _check_question(value: Any, key: str) -> str | _Reject:
    if value is None:
        return _Reject("missing_question", f"the row has no {key!r} value")
    if not isinstance(value, str):
        return _Reject("missing_question", f"{key!r} is a {type(value).__name__}, not text")
    if not value.strip():
        return _Reject("empty_question", f"{key!r} is empty")
    return value


def _convert_qa(
    row: dict[str, Any], layout: str, keys: frozenset[str], family: str | None
) -> _Task | _Reject:
    native = _native_id(row)
    qkey = next(k for k in QUESTION_KEYS if k in keys)
    akey = next((k for k in ANSWER_KEYS if k in keys), None)
    if family is None:
        row_family = row.get("family")
        if layout == "afm_web":
            family = "web"
        elif layout == "mhqa":
            family = "mhqa"
        elif isinstance(row_family, str) and row_family in FAMILIES:
            family = row_family
        elif "family" in keys:
            return _Reject("bad_family", f"family {row_family!r} is not one of {', '.join(FAMILIES)}", native)
        else:
            raise _NeedsFamily
    metadata = {k: v for k, v in row.items() if k not in (qkey, akey, "family", "test_cases")}
    raw_q = row.get(qkey)
    starter: str | None = None
    if qkey == "prompt" and isinstance(raw_q, list):  # chat messages: the user message is the question
        content = _user_content(raw_q)
        if isinstance(content, _Reject):
            content.native_id = native
            return content
        raw_q, how, starter = _extract_question(content, family == "code")
        metadata["question_extraction"] = how
    question = _check_question(raw_q, qkey)
    if isinstance(question, _Reject):
        question.native_id = native
        return question
    gold = _gold(row.get(akey)) if akey else []
    tests: dict[str, Any] | None = None
    if family == "code":
        raw_tests = row.get("test_cases")
        if raw_tests is None:
            return _Reject("missing_tests", "a code task needs a test_cases value", native)
        parsed = _parse_structured(raw_tests) if isinstance(raw_tests, str) else raw_tests
        if not isinstance(parsed, dict):
            return _Reject("bad_test_cases", "test_cases is not an object (JSON or repr)", native)
        made = _make_tests(parsed, parsed.get("starter_code") or starter, parsed.get("fn_name"))
        if isinstance(made, _Reject):
            made.reason, made.native_id = "bad_test_cases", native
            return made
        tests = made
    elif not gold:
        return _Reject("missing_answer", f"no gold answer in {akey or 'answer'!r}", native)
    return _Task(native, family, question, gold, tests, metadata)


def _convert_afm_rl(row: dict[str, Any], family: str | None) -> _Task | _Reject:
    extra = row.get("extra_info")
    extra_info: dict[str, Any] = {}
    if isinstance(extra, str):
        parsed_extra = _parse_structured(extra)
        if not isinstance(parsed_extra, dict):
            return _Reject("bad_extra_info", "extra_info is a string that is neither a JSON nor a repr dict")
        extra_info = parsed_extra
    elif isinstance(extra, dict):
        extra_info = extra
    elif extra is not None:
        return _Reject("bad_extra_info", f"extra_info is a {type(extra).__name__}, not an object")
    rm = row.get("reward_model")
    if isinstance(rm, str):
        rm = _parse_structured(rm)
        if not isinstance(rm, dict):
            return _Reject(
                "bad_ground_truth",
                "reward_model is a string that is neither a JSON nor a repr object",
                _native_id(extra_info, ("index", "question_id")),
            )
    gt = rm.get("ground_truth") if isinstance(rm, dict) else None
    parsed_gt = _parse_ground_truth(gt)
    native = _native_id(extra_info, ("index", "question_id"))
    if native is None and isinstance(parsed_gt, dict):
        native = _native_id(parsed_gt, ("question_id",))
    if isinstance(parsed_gt, _Reject):
        parsed_gt.native_id = native
        return parsed_gt
    if isinstance(parsed_gt, _Targets):  # answers without a family: the config must give one
        if family is None:
            raise _NeedsFamily
        row_family = family
        mismatch = family == "code"
    else:
        row_family = "code" if isinstance(parsed_gt, dict) else "math"
        mismatch = family is not None and family != row_family
    if mismatch:
        kind = "code tests" if isinstance(parsed_gt, dict) else "answers, not code tests"
        return _Reject(
            "family_mismatch",
            f"the source config says family {family!r} but the ground truth holds {kind}",
            native,
        )
    prompt = row.get("prompt")
    if isinstance(prompt, str) and prompt.lstrip()[:1] in ("[", "{"):
        prompt = _parse_structured(prompt)
        if prompt is None:
            return _Reject("bad_prompt", "prompt is a string that is neither JSON nor a Python repr", native)
    content = _user_content(prompt)
    if isinstance(content, _Reject):
        content.native_id = native
        return content
    question, how, starter_in_prompt = _extract_question(content, row_family == "code")
    if not question.strip():
        return _Reject("empty_question", f"the prompt has no text after the task marker ({how})", native)
    metadata: dict[str, Any] = {
        k: v for k, v in row.items() if k not in ("prompt", "reward_model", "extra_info")
    }
    if isinstance(rm, dict):
        metadata.update({f"reward_{k}": v for k, v in rm.items() if k != "ground_truth"})
    for k, v in extra_info.items():
        if k not in EXTRA_INFO_DROPPED:
            metadata.setdefault(k, v)
    extra_meta = extra_info.get("metadata")
    if isinstance(extra_meta, str):
        extra_meta = _parse_structured(extra_meta) if extra_meta.strip() else None
    if extra_meta:
        metadata["extra_metadata"] = extra_meta
    metadata["question_extraction"] = how
    if isinstance(parsed_gt, dict):
        if parsed_gt.get("question_id") is not None:
            metadata["question_id"] = parsed_gt["question_id"]
        starter = extra_info.get("starter_code") or starter_in_prompt
        fn_name = extra_meta.get("func_name") if isinstance(extra_meta, dict) else None
        tests = _make_tests(parsed_gt, starter, fn_name)
        if isinstance(tests, _Reject):
            tests.native_id = native
            return tests
        return _Task(native, "code", question, [], tests, metadata)
    return _Task(native, row_family, question, list(parsed_gt), None, metadata)


def _parse_structured(text: str) -> Any:
    """A JSON or Python-repr value from ``text``, or None when it is neither."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


_TEST_KEYS = ("stdin", "expected_output", "functional")


def _parse_ground_truth(gt: Any) -> dict[str, Any] | list[str] | _Targets | _Reject:
    """Code tests (a dict) or math gold answers (a list) from a ground truth value."""
    if gt is None:
        return _Reject("missing_answer", "reward_model has no ground_truth")
    obj: Any = gt
    if isinstance(gt, str):
        text = gt.strip()
        if not text:
            return _Reject("missing_answer", "ground_truth is empty")
        if text[:1] not in ("{", "["):
            return [gt]
        obj = _parse_structured(text)
        if obj is None:
            if any(k in text for k in _TEST_KEYS):
                return _Reject("bad_ground_truth", "ground_truth looks like code tests but is not JSON/repr")
            return [gt]  # e.g. a set-valued math answer such as "{x | x > 0}"
        if not isinstance(obj, dict):
            return [gt]
    if isinstance(obj, dict):
        if any(k in obj for k in _TEST_KEYS):
            return obj
        if "target" in obj:  # AFM web/MHQA RL ground truth; the family must come from the config
            return _Targets(_gold(obj["target"])) or _Reject("missing_answer", "ground_truth target is empty")
        return _Reject("bad_ground_truth", f"ground_truth object has no tests (keys {sorted(obj)[:10]})")
    gold = _gold(obj)
    return gold or _Reject("missing_answer", "ground_truth holds no answer")


def _make_tests(obj: Mapping[str, Any], starter: Any, fn_name: Any) -> dict[str, Any] | _Reject:
    starter_code = starter if isinstance(starter, str) and starter.strip() else None
    if not (isinstance(fn_name, str) and fn_name):
        fn_name = _fn_name_from_starter(starter_code)
    stdin, expected, functional = obj.get("stdin"), obj.get("expected_output"), obj.get("functional")
    kind = obj.get("kind") or ("stdin" if stdin is not None else "functional")
    if kind == "stdin":
        if not isinstance(stdin, list) or not isinstance(expected, list):
            return _Reject("bad_ground_truth", "stdin tests need stdin and expected_output lists")
        if not stdin or len(stdin) != len(expected):
            return _Reject(
                "bad_ground_truth",
                f"{len(stdin)} stdin value(s) vs {len(expected)} expected output(s); need equal, non-zero",
            )
        if any(v is None for v in stdin + expected):
            return _Reject("bad_ground_truth", "null stdin or expected_output value")
        return {
            "kind": "stdin",
            "stdin": [str(v) for v in stdin],
            "expected_output": [str(v) for v in expected],
            "functional": None,
            "fn_name": fn_name,
            "starter_code": starter_code,
        }
    if kind == "functional":
        if not isinstance(functional, str) or not functional.strip():
            return _Reject("bad_ground_truth", "functional tests need a non-empty assert snippet")
        return {
            "kind": "functional",
            "stdin": None,
            "expected_output": None,
            "functional": functional,
            "fn_name": fn_name,
            "starter_code": starter_code,
        }
    return _Reject("bad_ground_truth", f"unknown test kind {kind!r} (expected stdin or functional)")


def _fn_name_from_starter(starter: str | None) -> str | None:
    if not starter:
        return None
    m = re.search(r"^\s*def\s+(\w+)\s*\(", starter, re.M)
    return m.group(1) if m else None


def _user_content(prompt: Any) -> str | _Reject:
    """The text of the last user message of a chat prompt (or a plain prompt string)."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list | tuple) or not prompt:
        return _Reject("bad_prompt", f"prompt is a {type(prompt).__name__}, not a list of chat messages")
    messages = [m for m in prompt if isinstance(m, dict)]
    if len(messages) != len(prompt):
        return _Reject("bad_prompt", "prompt holds items that are not {role, content} messages")
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        return _Reject("bad_prompt", "prompt has no user message")
    content = users[-1].get("content")
    if not isinstance(content, str):
        return _Reject("bad_prompt", "the user message has no text content")
    return content


_TASK_MARKER = re.compile(r"^[ \t]*Task:[ \t]*", re.M)
_CODE_TAIL = re.compile(
    r"^[ \t]*(?:Answer format:|In your? final answer code s?nippet|"
    r"You will use the following starter code)",
    re.M,
)
_STARTER_BLOCK = re.compile(r"You will use the following starter code[^\n]*\n\s*```[a-zA-Z]*\n(.*?)```", re.S)


def _extract_question(content: str, code: bool) -> tuple[str, str, str | None]:
    """(bare question, how it was found, starter code found in the prompt) from a user message."""
    markers = list(_TASK_MARKER.finditer(content))
    if markers:
        text, how = content[markers[-1].end() :], "task_marker"
    else:
        text, how = content, "full_prompt"
    starter = None
    if code:
        block = _STARTER_BLOCK.search(text)
        starter = block.group(1) if block else None
        tail = _CODE_TAIL.search(text)
        if tail:
            text = text[: tail.start()]
    return text.strip(), how, starter


# -- one source ------------------------------------------------------------------------------


def _import_one(
    cfg: TaskSourceConfig, name: str, progress: ProgressFn | None, now: dt.datetime
) -> tuple[SourceSummary, list[dict[str, Any]], list[dict[str, Any]]]:
    path = cfg.path
    src = _open(path)
    row_layout = _row_layout(path, src)
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
        if isinstance(result, _Task):
            if task_id in seen:
                result = _Reject(
                    "duplicate_id", f"id {local!r} already used by an earlier row of this source"
                )
            else:
                task_row = _task_row(result, task_id, name, raw)
                if not _is_utf8(task_row):
                    result = _Reject(
                        "bad_text", "the row holds text that is not valid Unicode (lone surrogates)"
                    )
        if isinstance(result, _Task) and task_row is not None:
            seen.add(task_id)
            ok_rows.append(task_row)
        else:
            assert isinstance(result, _Reject)
            bad_rows.append(
                {
                    "stage": STAGE,
                    "source": path,
                    "row_key": _safe_text(task_id),
                    "reason": result.reason,
                    "detail": _safe_text(f"row {raw.index}: {result.detail}"),
                    "payload": _payload(raw),
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
    raw: _Raw, row_layout: str, keys: frozenset[str], family: str | None, path: str, layout: str
) -> _Task | _Reject:
    if raw.row is None:
        return _Reject("bad_row", f"the row is {raw.problem}")
    try:
        if row_layout == "afm_rl":
            return _convert_afm_rl(raw.row, family)
        return _convert_qa(raw.row, row_layout, keys, family)
    except _NeedsFamily:
        raise _needs_family(path, layout) from None
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # an odd row must not end the import
        return _Reject("bad_row", f"cannot convert the row ({type(e).__name__}: {e})")


def _needs_family(path: str, layout: str) -> TaskImportError:
    return _fail(
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


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _task_row(task: _Task, task_id: str, name: str, raw: _Raw) -> dict[str, Any]:
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
        "metadata": _dumps(metadata),
    }


def _is_utf8(value: Any) -> bool:
    try:
        _dumps(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _safe_text(text: str) -> str:
    """``text`` with anything UTF-8 cannot hold (lone surrogates) written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _payload(raw: _Raw) -> str:
    text = raw.raw if raw.row is None and raw.raw is not None else _dumps(raw.row)
    return _safe_text(text[:PAYLOAD_LIMIT])
