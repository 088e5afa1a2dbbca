"""AFM's layouts: SFT records and RL rows as AFM's LLaMA-Factory and verl forks read them (written by
:mod:`coa.convert.export`).

The facts behind every choice are in ``afm-spec.md`` (§2.1 SFT data, §3.1 RL Parquet, §4 rewards).

**SFT** (:func:`to_afm_sft_record`): one alpaca record ``{"instruction", "input", "output"}``.
AFM registers its SFT files in ``dataset_info.json`` with ``file_name`` only, so LLaMA-Factory's
alpaca converter builds ONE user turn ``instruction + "\\n" + input`` and uses the template's
default system prompt: a ``system`` column would be ignored and the CoA rules silently lost. The
system prompt therefore goes into ``instruction`` and the question into ``input`` (as
``"\\n" + header + question``), so the user turn is byte for byte the RL prompt of the same task
(:func:`afm_user_turn`: system, a blank line, ``Question: …`` or ``Task:\\n…`` for ``code_math``).
``output`` is the whole trajectory as one assistant message, each observation closed by
``</observation>\\n\\n``, the end marker of AFM's token-id masker (``--ignore_observation``).
Caveat: that masker matches token ids, so escaped tool output that prints ``</observation>`` and
a blank line still ends its masked region early; :mod:`coa.format.masks` is immune.
:func:`afm_sft_dataset_entry` is the matching ``dataset_info.json`` entry (explicit alpaca columns).

**RL** (:func:`to_afm_rl_row`): one row of AFM's RL Parquet (verl ``RLHFDataset``): ``data_source``,
``prompt`` (one user message, :func:`afm_user_turn`), ``ability``, ``reward_model{ground_truth,
style}``, ``extra_info{index, need_tools_kwargs, question, split, task_id, tools_kwargs}``. What a
row must hold depends on the reward AFM routes it to, so :func:`afm_target` maps each task family:

==========  ======================  ==============  ===================================================
family      ``data_source``         reward manager  ``ground_truth``
==========  ======================  ==============  ===================================================
``math``    the task's source when  ``afm``         the gold answer, a plain string (``mathverify``);
            AFM scores it with      (AFM's code     several accepted answers: data source
            ``mathverify``, else    agent)          ``skywork_math`` and a JSON list string
            ``math_dapo``
``code``    ``skywork`` (or the     ``afm``         JSON string for ``skywork.compute_score``:
            source / ``skywork_``                   stdin tests ``{"inputs", "outputs"}`` (LCB
            + source when AFM                       ``check_correctness``); assert tests
            lists it)                               ``{"import_prefix", "test_code", "entry_point"}``
``mhqa``    the source when it is   ``batch``       ``{"question", "target": [answers]}``, a dict
            an AFM QA set (``nq``,                  (``mhqa_train``/``mhqa_eval`` index
            ``hotpotqa``…), else                    ``gt['target']``)
            ``hotpotqa``
``web``     ``search``              ``batch``       ``{"question", "target": [answers]}``, a dict
                                                    (``grm_simple`` judge: ``gt['target']``)
==========  ======================  ==============  ===================================================

"The task's source" is the source part of the task id (``aime24:0`` → ``aime24``), matched to AFM's
names ignoring case, also by its stem before ``_`` or ``-`` (``nq_500`` → ``nq``, ``math500`` →
``MATH500``). So the synthetic families land on: ``synthetic-arithmetic`` → ``math_dapo``,
``synthetic-programming`` → ``skywork``, ``synthetic-multihop`` → ``hotpotqa``. ``ability`` is
AFM's: ``coding`` for code, ``fact-reasoning`` for everything else (AFM's math parquets say so).
Assert tests ride on skywork's unit-test path: each test line is ``test_code[0] + test_code[i]``,
so the assert snippet is one ``exec`` line inside ``def check(candidate):`` and ``entry_point`` is
``None`` (the snippet calls the function itself); ``import_prefix`` is ``from typing import *``.

``extra_info.index`` is verl's GRPO group id: it must be unique per prompt across every file
trained together. It is ``{data_source}-{uuid5(task id, prompt)}``: AFM's ``{data_source}-{uuid}``
shape, but derived from the row, so reruns write identical files. ``tools_kwargs`` names exactly
the tools of the variant (verl raises on a called tool missing there; AFM's code tool config has
``code`` only, the web one ``web_search`` + ``crawl_page``, MHQA ``wiki_search``), each with
``create_kwargs{data_source, ground_truth, question}`` as AFM's ``prepare_data.py`` writes them.
Nested keys are written in sorted order, as in AFM's parquets, so the Arrow struct types match.
Rows routed to different reward managers or tool sets cannot share a Parquet file (the
``ground_truth`` and ``tools_kwargs`` types differ, and AFM trains each agent on its own file):
:func:`afm_rl_group` names the file group of a row.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from coa.format.codec import render_segment
from coa.format.grammar import grammar
from coa.format.segments import Trajectory

# AFM's reward dispatch (``reward_manager/afm.py``), by scorer: the data sources it accepts.
AFM_QA_SOURCES = frozenset(
    {"nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle", "mercury", "tq"}
)
AFM_MATH_SOURCES = frozenset(
    {"math_dapo", "aime24", "aime25", "MATH", "MATH500", "gms8k", "amc23", "OlympiadBench"}
)
AFM_SKYWORK_SOURCES = frozenset(
    {
        "skywork",
        "skywork_livecodebench_v4",
        "skywork_livecodebench_v5",
        "skywork_livecodebench_v6",
        "skywork_livecodebench_v1_to_v3",
        "skywork_math",
        "codeforces_areal_test",
        "codecontests_hf_test",
        "codecontests_hf_train",
        "codecontests_areal_test",
    }
)
AFM_SEARCH_SOURCE = "search"
ABILITY = {"math": "fact-reasoning", "code": "coding", "mhqa": "fact-reasoning", "web": "fact-reasoning"}
REWARD_MANAGER = {"math": "afm", "code": "afm", "mhqa": "batch", "web": "batch"}
FUNCTIONAL_IMPORT_PREFIX = "from typing import *\n"
_INDEX_NAMESPACE = uuid.UUID("6f0c7a52-2f9e-4d7e-9a53-61d1c3b1a0f4")


@dataclasses.dataclass(frozen=True)
class AfmTarget:
    """Where AFM's reward routing sends a row, and what it must find there."""

    data_source: str
    ability: str
    ground_truth: str | dict[str, Any]
    reward_manager: str  # AFM's ``reward_model.reward_manager``: ``afm`` (code/math) or ``batch``


def afm_user_turn(system: str, question: str, variant: str) -> str:
    """The one user message of AFM's layouts: system prompt, blank line, ``Question: q`` / ``Task:\\nq``."""
    header = "Task:\n" if variant == "code_math" else "Question: "
    return f"{system.strip()}\n\n{header}{question.strip()}"


# -- SFT ------------------------------------------------------------------------------------------


def render_afm_sft(trajectory: Trajectory) -> str:
    """The canonical rendering with each ``</observation>`` followed by a blank line."""
    return "".join(render_segment(s) + ("\n" if s.tag == "observation" else "") for s in trajectory)


def to_afm_sft_record(system: str, question: str, trajectory: Trajectory, variant: str) -> dict[str, str]:
    """An alpaca record whose LLaMA-Factory user turn is :func:`afm_user_turn` (no ``system`` column)."""
    instruction = system.strip()
    query = afm_user_turn(system, question, variant)[len(instruction) + 1 :]  # "\n" + header + question
    return {"instruction": instruction, "input": query, "output": render_afm_sft(trajectory)}


def to_mhqa(trajectory: Trajectory) -> Trajectory:
    """A ``web`` trajectory in AFM's MHQA grammar (``MHQA_PROMPT``), which AFM's MHQA agent accepts.

    ``web_search`` becomes ``wiki_search`` (same query, same observation); ``suggested_answer`` and
    ``double_check``, which MHQA does not have, are dropped with the ``think`` directly before each,
    so ``… think suggested_answer think double_check think answer`` ends ``… think answer``. Nothing
    is invented: a ``crawl_page`` (MHQA has no crawler) or a result that breaks the ``mhqa`` grammar
    (e.g. a low double-check score that re-planned after a search) raises ``ValueError`` naming why.
    """
    from coa.format.grammar import validate

    out: list[tuple[str, str]] = []
    for segment in trajectory:
        if segment.tag == "crawl_page":
            raise ValueError("crawl_page: AFM's MHQA agent has no crawler")
        if segment.tag in ("suggested_answer", "double_check"):
            if out and out[-1][0] == "think":
                out.pop()
            continue
        out.append(("wiki_search" if segment.tag == "web_search" else segment.tag, segment.content))
    converted = Trajectory.of(out)
    result = validate(converted, "mhqa")
    if not result.ok:
        raise ValueError(f"mhqa grammar: {result.rule}")
    return converted


def afm_sft_dataset_entry(file_name: str) -> dict[str, Any]:
    """The ``dataset_info.json`` entry for an exported file: alpaca, the three columns named."""
    return {
        "file_name": file_name,
        "formatting": "alpaca",
        "columns": {"prompt": "instruction", "query": "input", "response": "output"},
    }


# -- RL -------------------------------------------------------------------------------------------


def _code_ground_truth(tests: Mapping[str, Any]) -> dict[str, Any]:
    if tests.get("kind") == "functional":
        snippet = tests.get("functional") or ""
        return {
            "entry_point": "None",
            "import_prefix": FUNCTIONAL_IMPORT_PREFIX,
            "test_code": f"def check(candidate):\n    exec({snippet!r}, globals())\n",
        }
    stdin, expected = list(tests.get("stdin") or []), list(tests.get("expected_output") or [])
    if not stdin or len(stdin) != len(expected):
        raise ValueError("stdin tests need as many inputs as expected outputs (at least one)")
    return {"inputs": stdin, "outputs": expected}


def _known(source: str, names: frozenset[str]) -> str | None:
    """The AFM data source ``source`` names: itself or its stem before ``_``/``-``, any case."""
    by_lower = {n.lower(): n for n in names}
    for candidate in (source, re.split(r"[_-]", source, maxsplit=1)[0]):
        if candidate.lower() in by_lower:
            return by_lower[candidate.lower()]
    return None


def afm_target(
    family: str,
    source: str,
    question: str,
    gold_answers: Sequence[str],
    test_cases: Mapping[str, Any] | None = None,
) -> AfmTarget:
    """The data source, ability and ground truth AFM's reward routing needs for one task."""
    golds = [str(g) for g in gold_answers]
    if family == "code":
        if not test_cases:
            raise ValueError("a code task needs test cases for AFM's code reward")
        code_sources = AFM_SKYWORK_SOURCES - {"skywork_math"}
        data_source = _known(source, code_sources) or _known(f"skywork_{source}", code_sources) or "skywork"
        truth = json.dumps(_code_ground_truth(test_cases), ensure_ascii=False)
        return AfmTarget(data_source, ABILITY[family], truth, REWARD_MANAGER[family])
    if not golds:
        raise ValueError(f"a {family} task needs at least one gold answer")
    if family == "math":
        if len(golds) > 1:
            truth = json.dumps(golds, ensure_ascii=False)
            return AfmTarget("skywork_math", ABILITY[family], truth, REWARD_MANAGER[family])
        data_source = _known(source, AFM_MATH_SOURCES) or "math_dapo"
        return AfmTarget(data_source, ABILITY[family], golds[0], REWARD_MANAGER[family])
    if family not in ("mhqa", "web"):
        raise ValueError(f"unknown family {family!r}")
    data_source = (_known(source, AFM_QA_SOURCES) or "hotpotqa") if family == "mhqa" else AFM_SEARCH_SOURCE
    truth_dict = {"question": question, "target": golds}
    return AfmTarget(data_source, ABILITY[family], truth_dict, REWARD_MANAGER[family])


def afm_index(data_source: str, key: str) -> str:
    """``{data_source}-{uuid}``, the uuid derived from ``key`` (stable across runs)."""
    return f"{data_source}-{uuid.uuid5(_INDEX_NAMESPACE, key)}"


def afm_rl_group(variant: str, target: AfmTarget) -> str:
    """The file group of a row: rows of one group share AFM's reward manager and tool config."""
    return f"{variant}.{target.reward_manager}"


def to_afm_rl_row(
    system: str,
    question: str,
    target: AfmTarget,
    *,
    variant: str,
    split: str = "train",
    task_id: str | None = None,
    index: str | None = None,
) -> dict[str, Any]:
    content = afm_user_turn(system, question, variant)
    task_id = task_id if task_id is not None else ""
    if index is None:
        index = afm_index(target.data_source, f"{task_id}\n{content}")
    truth = target.ground_truth
    create_truth: Any = truth["target"] if isinstance(truth, dict) else truth
    create = {"data_source": target.data_source, "ground_truth": create_truth, "question": question}
    return {
        "data_source": target.data_source,
        "prompt": [{"content": content, "role": "user"}],
        "ability": target.ability,
        "reward_model": {"ground_truth": truth, "style": "rule"},
        "extra_info": {
            "index": index,
            "need_tools_kwargs": True,
            "question": question,
            "split": split,
            "task_id": task_id,
            "tools_kwargs": {tool: {"create_kwargs": dict(create)} for tool in grammar(variant).tools},
        },
    }
