"""AFM's own readers, re-implemented for the tests from ``afm-spec.md`` (our code, not AFM's).

* :func:`afm_code_format_ok`: the code-format check of AFM's verl reward (``FormatReward``'s
  ``check_code_format_correctness``, §4.4): ``<code>`` tags paired; at least one ``<code>`` block;
  in each, exactly one ```` ```py\\n ````, closed by the next ```` ```\\n ````; after it either
  nothing but whitespace, or exactly one ```` ```sh\\n ```` block closed by ```` ```\\n ```` and then
  nothing but whitespace.
* :func:`lf_alpaca_turns`: LLaMA-Factory's dataset attributes + alpaca converter (§2.1): the
  system prompt it uses (``None`` = the template's default), the one user turn, the response.
* :func:`lf_observations_balanced`: the ``--ignore_observation`` example filter (§2.2).
* :func:`afm_reward_path`: AFM's reward routing (§3.1, §4): which scorer a row of an RL Parquet
  reaches under the reward manager it is trained with, raising where AFM would fail.
* :func:`afm_score`: that scorer run on a response (math-verify, EM, stdin/stdout and assert code
  tests in our sandbox); the LLM judge of web rows is not called (no network), only its inputs
  are checked.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any

# -- code format (FormatReward.check_code_format_correctness) -------------------------------------


class JudgeOnly(Exception):
    """AFM scores this path with an LLM judge, not a rule: no rule-based score exists."""


def _code_tags_paired(text: str) -> bool:
    depth = 0
    for m in re.finditer(r"</?code>", text):
        if m.group(0) == "<code>":
            depth += 1
        elif depth == 0:
            return False
        else:
            depth -= 1
    return depth == 0


def _one_block(region: str, opener: str) -> tuple[bool, str]:
    """(ok, text after the block's closing fence) for exactly one ``opener`` … ```` ```\\n ````."""
    if region.count(opener) != 1:
        return False, ""
    start = region.index(opener) + len(opener)
    close = region.find("```\n", start)
    if close == -1:
        return False, ""
    return True, region[close + len("```\n") :]


def afm_code_format_ok(text: str) -> bool:
    if not _code_tags_paired(text):
        return False
    blocks = re.findall(r"<code>(.*?)</code>", text, flags=re.DOTALL)
    if not blocks:
        return False
    for block in blocks:
        ok, after = _one_block(block, "```py\n")
        if not ok:
            return False
        if after.strip():
            ok, rest = _one_block(after, "```sh\n")
            if not ok or rest.strip():
                return False
    return True


# -- LLaMA-Factory ---------------------------------------------------------------------------------

_LF_DEFAULT_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "system": None}


def lf_alpaca_turns(entry: Mapping[str, Any], example: Mapping[str, Any]) -> tuple[str | None, str, str]:
    """``(system or None for the template default, user turn, response)`` as LLaMA-Factory builds them."""
    if entry.get("formatting", "alpaca") != "alpaca":
        raise ValueError("not an alpaca dataset")
    columns = dict(_LF_DEFAULT_COLUMNS)
    if "columns" in entry:  # every attribute is then read from `columns`, missing ones become None
        columns = {name: entry["columns"].get(name) for name in _LF_DEFAULT_COLUMNS}
    query = [example[c] for c in (columns["prompt"], columns["query"]) if c and example.get(c)]
    response = example[columns["response"]] if columns["response"] else None
    if not isinstance(response, str):
        raise ValueError("no response: the record would be unsupervised")
    system = example[columns["system"]] if columns["system"] else None
    return system or None, "\n".join(query), response


def lf_observations_balanced(response: str, tag: str = "observation") -> bool:
    depth = 0
    for m in re.finditer(rf"<(/?){tag}>", response):
        depth += -1 if m.group(1) else 1
        if depth not in (0, 1):
            return False
    return depth == 0


# -- AFM reward routing ----------------------------------------------------------------------------

AFM_DISPATCH = {
    **dict.fromkeys(
        ["nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "mercury", "tq"],
        "qa_em",
    ),
    **dict.fromkeys(
        ["math_dapo", "aime24", "aime25", "MATH", "MATH500", "gms8k", "amc23", "OlympiadBench"], "mathverify"
    ),
    **dict.fromkeys(["livecodebench", "lcbv5", "lcbv4"], "lcb (not imported: NameError)"),
    "codeforces": "codeforces",
    "GPQA_dimand": "gpqa (not imported: NameError)",
    **dict.fromkeys(
        [
            "skywork",
            "skywork_livecodebench_v4",
            "skywork_livecodebench_v6",
            "skywork_livecodebench_v5",
            "skywork_livecodebench_v1_to_v3",
            "skywork_math",
            "codeforces_areal_test",
            "codecontests_hf_test",
            "codecontests_hf_train",
            "codecontests_areal_test",
        ],
        "skywork",
    ),  # fmt: skip
    "search": "grm_simple",
}
AFM_ABILITIES = {"fact-reasoning", "coding"}


def afm_reward_path(row: Mapping[str, Any], manager: str) -> str:
    """The scorer a row reaches: ``mathverify``, ``skywork:math``, ``skywork:stdin``,
    ``skywork:unit_test``, ``skywork:lcb_pickle``, ``batch:judge`` or ``batch:em``.

    Raises ``AssertionError`` with AFM's failure where AFM would fail or silently score nothing.
    """
    gt = row["reward_model"]["ground_truth"]
    extra = row["extra_info"]
    assert row["ability"] in AFM_ABILITIES, f"ability {row['ability']!r}"
    assert extra["need_tools_kwargs"] is True and extra["tools_kwargs"], "no tools_kwargs"
    for tool, kwargs in extra[
        "tools_kwargs"
    ].items():  # the rollout calls create(**kwargs.get("create_kwargs", {}))
        assert isinstance(kwargs, Mapping) and isinstance(kwargs.get("create_kwargs", {}), Mapping), tool
    if manager == "batch":  # BatchRewardManager: questions from extra_info, gt['target'] indexed directly
        assert isinstance(extra.get("question"), str) and extra["question"], "extra_info.question"
        assert isinstance(gt, Mapping) and "target" in gt, f"gt['target'] on {type(gt).__name__}"
        assert list(gt["target"]) and all(isinstance(t, str) for t in gt["target"])
        return "batch:judge" if row["data_source"] == "search" else "batch:em"
    assert manager == "afm", manager
    scorer = AFM_DISPATCH.get(row["data_source"])
    assert scorer is not None, f"data_source {row['data_source']!r}: reward fn not found (AFM raises here)"
    assert scorer in ("mathverify", "skywork"), f"{row['data_source']} -> {scorer}, unusable for training"
    assert isinstance(gt, str), "the afm manager passes ground_truth on as a string"
    if scorer == "mathverify":
        return "mathverify"
    parsed = json.loads(gt)
    if isinstance(parsed, list):
        assert parsed, "empty math ground truth"
        return "skywork:math"
    assert isinstance(parsed, dict), "skywork needs a JSON list or object"
    if parsed.get("question_id"):
        return "skywork:lcb_pickle"
    if parsed.get("import_prefix"):
        assert {"test_code", "entry_point"} <= set(parsed), "unit tests need test_code and entry_point"
        return "skywork:unit_test"
    assert parsed.get("inputs"), "neither question_id, import_prefix nor inputs: skywork raises ValueError"
    assert len(parsed["inputs"]) == len(parsed.get("outputs") or []), "inputs vs outputs"
    return "skywork:stdin"


def last_answer(response: str) -> str:
    """AFM's ``try_extract_solution``: the content of the last ``<answer>…</answer>``, stripped."""
    found = list(re.finditer(r"<answer>(.*?)</answer>", response, re.DOTALL))
    return found[-1].group(1).strip() if found else ""


def _code_of(answer: str) -> str | None:
    """AFM's ``parse_code_blobs``: the ``` / ```py / ```python blocks joined, or the text if it parses."""
    blocks = re.findall(r"```(?:py|python)?\n(.*?)\n```", answer, re.DOTALL)
    if blocks:
        return "\n\n".join(blocks)
    try:
        compile(answer, "<answer>", "exec")
    except SyntaxError:
        return None
    return answer


def _normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def afm_score(row: Mapping[str, Any], manager: str, response: str) -> float:
    """The reward AFM would give ``response`` for ``row`` (web judge: see the module docstring)."""
    from math_verify import parse, verify

    from coa.tools.sandbox import SandboxConfig, run_python

    path = afm_reward_path(row, manager)
    gt = row["reward_model"]["ground_truth"]
    answer = last_answer(response)
    if path.startswith("batch:"):
        parts = [p for p in answer.split("|") if p]
        golds = {_normalize(t) for t in gt["target"]}
        if path == "batch:judge":
            raise JudgeOnly("the web reward is an LLM judge")
        return float(bool(parts) and all(_normalize(p) in golds for p in parts))
    if path in ("mathverify", "skywork:math"):
        accepted: list[str] = [gt] if path == "mathverify" else json.loads(gt)
        parsed = parse(answer)
        if len(parsed) < 2:
            return 0.0
        if parsed[1] in accepted:
            return 1.0
        return float(any(verify(parse(f"\\boxed{{{g}}}"), parsed) for g in accepted))
    code = _code_of(answer)
    if code is None:
        return 0.0
    tests = json.loads(gt)
    config = SandboxConfig(cpu_seconds=6, wall_seconds=10)
    if path == "skywork:stdin":
        for stdin, expected in zip(tests["inputs"], tests["outputs"], strict=True):
            result = run_python(code, stdin=stdin, config=config)
            if result.exit_code != 0 or result.stdout.split() != expected.split():
                return 0.0
        return 1.0
    assert path == "skywork:unit_test", path
    lines = [line for line in tests["test_code"].split("\n") if line]
    program = tests["import_prefix"] + code
    for line in lines[1:]:
        run = f"{program}\n{lines[0]}{line}\ncheck({tests['entry_point']})"
        if run_python(run, config=config).exit_code != 0:
            return 0.0
    return 1.0
