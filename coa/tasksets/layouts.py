"""Task-set import, layouts: which layout a source's rows have, and one row → a task or a reject.

:func:`detect_row_layout` reads the keys of a sample of rows (never the file name): ``afm_rl`` (the
AFM code/math RL columns), ``afm_web`` (GAIA/WebWalker/BrowseComp/HLE), ``mhqa`` (a list answer) or
``plain`` (a question and an answer or ``test_cases`` column); see :mod:`coa.tasksets.importer`.
:func:`convert_qa` and :func:`convert_afm_rl` turn one row into a :class:`ParsedTask` or a
:class:`Reject` (a reason code and a detail, quarantined by the importer); a row whose layout does not
fix its family, from a source that names none, raises :class:`NeedsFamily`.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from coa.tasksets.containers import OpenedSource, fail
from schemas.task import FAMILIES

QUESTION_KEYS = ("question", "problem", "prompt")
ANSWER_KEYS = ("answer", "answers", "gold_answers")
ID_KEYS = ("task_id", "id", "question_id", "qid", "_id", "uid", "unique_id")
WEB_MARKER_KEYS = frozenset({"Annotator_Metadata", "root_url"})  # GAIA, WebWalker
EXTRA_INFO_DROPPED = frozenset({"tools_kwargs", "need_tools_kwargs", "starter_code", "metadata"})


def detect_row_layout(path: str, src: OpenedSource) -> str:
    keys = src.keys
    if {"prompt", "reward_model"} <= keys:
        return "afm_rl"
    qkey = next((k for k in QUESTION_KEYS if k in keys), None)
    akey = next((k for k in ANSWER_KEYS if k in keys), None)
    if qkey is None or (akey is None and "test_cases" not in keys):
        raise fail(
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


@dataclasses.dataclass
class Reject:
    reason: str
    detail: str
    native_id: str | None = None


@dataclasses.dataclass
class ParsedTask:
    native_id: str | None
    family: str
    question: str
    gold_answers: list[str]
    test_cases: dict[str, Any] | None
    metadata: dict[str, Any]


class NeedsFamily(Exception):
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


def _check_question(value: Any, key: str) -> str | Reject:
    if value is None:
        return Reject("missing_question", f"the row has no {key!r} value")
    if not isinstance(value, str):
        return Reject("missing_question", f"{key!r} is a {type(value).__name__}, not text")
    if not value.strip():
        return Reject("empty_question", f"{key!r} is empty")
    return value


def convert_qa(
    row: dict[str, Any], layout: str, keys: frozenset[str], family: str | None
) -> ParsedTask | Reject:
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
            return Reject("bad_family", f"family {row_family!r} is not one of {', '.join(FAMILIES)}", native)
        else:
            raise NeedsFamily
    metadata = {k: v for k, v in row.items() if k not in (qkey, akey, "family", "test_cases")}
    raw_q = row.get(qkey)
    starter: str | None = None
    if qkey == "prompt" and isinstance(raw_q, list):  # chat messages: the user message is the question
        content = _user_content(raw_q)
        if isinstance(content, Reject):
            content.native_id = native
            return content
        raw_q, how, starter = _extract_question(content, family == "code")
        metadata["question_extraction"] = how
    question = _check_question(raw_q, qkey)
    if isinstance(question, Reject):
        question.native_id = native
        return question
    gold = _gold(row.get(akey)) if akey else []
    tests: dict[str, Any] | None = None
    if family == "code":
        raw_tests = row.get("test_cases")
        if raw_tests is None:
            return Reject("missing_tests", "a code task needs a test_cases value", native)
        parsed = _parse_structured(raw_tests) if isinstance(raw_tests, str) else raw_tests
        if not isinstance(parsed, dict):
            return Reject("bad_test_cases", "test_cases is not an object (JSON or repr)", native)
        made = _make_tests(parsed, parsed.get("starter_code") or starter, parsed.get("fn_name"))
        if isinstance(made, Reject):
            made.reason, made.native_id = "bad_test_cases", native
            return made
        tests = made
    elif not gold:
        return Reject("missing_answer", f"no gold answer in {akey or 'answer'!r}", native)
    return ParsedTask(native, family, question, gold, tests, metadata)


def convert_afm_rl(row: dict[str, Any], family: str | None) -> ParsedTask | Reject:
    extra = row.get("extra_info")
    extra_info: dict[str, Any] = {}
    if isinstance(extra, str):
        parsed_extra = _parse_structured(extra)
        if not isinstance(parsed_extra, dict):
            return Reject("bad_extra_info", "extra_info is a string that is neither a JSON nor a repr dict")
        extra_info = parsed_extra
    elif isinstance(extra, dict):
        extra_info = extra
    elif extra is not None:
        return Reject("bad_extra_info", f"extra_info is a {type(extra).__name__}, not an object")
    rm = row.get("reward_model")
    if isinstance(rm, str):
        rm = _parse_structured(rm)
        if not isinstance(rm, dict):
            return Reject(
                "bad_ground_truth",
                "reward_model is a string that is neither a JSON nor a repr object",
                _native_id(extra_info, ("index", "question_id")),
            )
    gt = rm.get("ground_truth") if isinstance(rm, dict) else None
    parsed_gt = _parse_ground_truth(gt)
    native = _native_id(extra_info, ("index", "question_id"))
    if native is None and isinstance(parsed_gt, dict):
        native = _native_id(parsed_gt, ("question_id",))
    if isinstance(parsed_gt, Reject):
        parsed_gt.native_id = native
        return parsed_gt
    if isinstance(parsed_gt, _Targets):  # answers without a family: the config must give one
        if family is None:
            raise NeedsFamily
        row_family = family
        mismatch = family == "code"
    else:
        row_family = "code" if isinstance(parsed_gt, dict) else "math"
        mismatch = family is not None and family != row_family
    if mismatch:
        kind = "code tests" if isinstance(parsed_gt, dict) else "answers, not code tests"
        return Reject(
            "family_mismatch",
            f"the source config says family {family!r} but the ground truth holds {kind}",
            native,
        )
    prompt = row.get("prompt")
    if isinstance(prompt, str) and prompt.lstrip()[:1] in ("[", "{"):
        prompt = _parse_structured(prompt)
        if prompt is None:
            return Reject("bad_prompt", "prompt is a string that is neither JSON nor a Python repr", native)
    content = _user_content(prompt)
    if isinstance(content, Reject):
        content.native_id = native
        return content
    question, how, starter_in_prompt = _extract_question(content, row_family == "code")
    if not question.strip():
        return Reject("empty_question", f"the prompt has no text after the task marker ({how})", native)
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
        if isinstance(tests, Reject):
            tests.native_id = native
            return tests
        return ParsedTask(native, "code", question, [], tests, metadata)
    return ParsedTask(native, row_family, question, list(parsed_gt), None, metadata)


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


def _parse_ground_truth(gt: Any) -> dict[str, Any] | list[str] | _Targets | Reject:
    """Code tests (a dict) or math gold answers (a list) from a ground truth value."""
    if gt is None:
        return Reject("missing_answer", "reward_model has no ground_truth")
    obj: Any = gt
    if isinstance(gt, str):
        text = gt.strip()
        if not text:
            return Reject("missing_answer", "ground_truth is empty")
        if text[:1] not in ("{", "["):
            return [gt]
        obj = _parse_structured(text)
        if obj is None:
            if any(k in text for k in _TEST_KEYS):
                return Reject("bad_ground_truth", "ground_truth looks like code tests but is not JSON/repr")
            return [gt]  # e.g. a set-valued math answer such as "{x | x > 0}"
        if not isinstance(obj, dict):
            return [gt]
    if isinstance(obj, dict):
        if any(k in obj for k in _TEST_KEYS):
            return obj
        if "target" in obj:  # AFM web/MHQA RL ground truth; the family must come from the config
            return _Targets(_gold(obj["target"])) or Reject("missing_answer", "ground_truth target is empty")
        return Reject("bad_ground_truth", f"ground_truth object has no tests (keys {sorted(obj)[:10]})")
    gold = _gold(obj)
    return gold or Reject("missing_answer", "ground_truth holds no answer")


def _make_tests(obj: Mapping[str, Any], starter: Any, fn_name: Any) -> dict[str, Any] | Reject:
    starter_code = starter if isinstance(starter, str) and starter.strip() else None
    if not (isinstance(fn_name, str) and fn_name):
        fn_name = _fn_name_from_starter(starter_code)
    stdin, expected, functional = obj.get("stdin"), obj.get("expected_output"), obj.get("functional")
    kind = obj.get("kind") or ("stdin" if stdin is not None else "functional")
    if kind == "stdin":
        if not isinstance(stdin, list) or not isinstance(expected, list):
            return Reject("bad_ground_truth", "stdin tests need stdin and expected_output lists")
        if not stdin or len(stdin) != len(expected):
            return Reject(
                "bad_ground_truth",
                f"{len(stdin)} stdin value(s) vs {len(expected)} expected output(s); need equal, non-zero",
            )
        if any(v is None for v in stdin + expected):
            return Reject("bad_ground_truth", "null stdin or expected_output value")
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
            return Reject("bad_ground_truth", "functional tests need a non-empty assert snippet")
        return {
            "kind": "functional",
            "stdin": None,
            "expected_output": None,
            "functional": functional,
            "fn_name": fn_name,
            "starter_code": starter_code,
        }
    return Reject("bad_ground_truth", f"unknown test kind {kind!r} (expected stdin or functional)")


def _fn_name_from_starter(starter: str | None) -> str | None:
    if not starter:
        return None
    m = re.search(r"^\s*def\s+(\w+)\s*\(", starter, re.M)
    return m.group(1) if m else None


def _user_content(prompt: Any) -> str | Reject:
    """The text of the last user message of a chat prompt (or a plain prompt string)."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list | tuple) or not prompt:
        return Reject("bad_prompt", f"prompt is a {type(prompt).__name__}, not a list of chat messages")
    messages = [m for m in prompt if isinstance(m, dict)]
    if len(messages) != len(prompt):
        return Reject("bad_prompt", "prompt holds items that are not {role, content} messages")
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        return Reject("bad_prompt", "prompt has no user message")
    content = users[-1].get("content")
    if not isinstance(content, str):
        return Reject("bad_prompt", "the user message has no text content")
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
