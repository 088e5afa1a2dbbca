"""Exporters to the AFM layouts, for compatibility with AFM's LLaMA-Factory and verl forks.

* :func:`to_afm_sft_record`: one alpaca record (``instruction``, ``input``, ``output``, ``system``)
  as LLaMA-Factory reads it: ``system`` is the system message, ``instruction`` the user turn (the
  question; ``input`` is left empty) and ``output`` the whole trajectory as one assistant message.
  The output is the canonical rendering except that each observation is closed by
  ``</observation>\\n\\n``, the end marker AFM's token-id masker (``--ignore_observation``) looks for.
  Caveat: that masker matches token ids, so escaped tool output that prints ``</observation>``
  and a blank line still ends its masked region early; :mod:`coa.format.masks` is immune.
* :func:`to_afm_rl_row`: one row of AFM's RL Parquet (verl ``RLHFDataset``): ``data_source``,
  ``prompt`` (one user message: system prompt, a blank line, then ``Question: …``, or ``Task:\\n…``
  for ``code_math`` as in AFM's code/math parquets), ``ability``, ``reward_model{ground_truth,
  style}`` and ``extra_info{index, question, split, need_tools_kwargs, tools_kwargs}``.

  ``ground_truth`` is always a string, as in AFM's benchmark parquets: a string answer is kept, a
  list of answers becomes ``json.dumps({"target": [...], "question": q})`` (``prepare_data.py``);
  readers that need a dict (AFM's web/MHQA batch rewards) must ``json.loads`` it.
  Nested keys are written in sorted order, as in AFM's parquets, so the Arrow struct types match.
  ``extra_info.index`` is verl's GRPO group id, so it must be unique per prompt: by default it is
  ``{data_source}-{first 16 hex of sha256(prompt)}``, stable across runs. ``tools_kwargs`` names
  every tool of the variant (verl raises on a tool missing there).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from coa.format.codec import render_segment
from coa.format.grammar import grammar
from coa.format.segments import Trajectory


def render_afm_sft(trajectory: Trajectory) -> str:
    """The canonical rendering with each ``</observation>`` followed by a blank line."""
    return "".join(render_segment(s) + ("\n" if s.tag == "observation" else "") for s in trajectory)


def to_afm_sft_record(system: str, question: str, trajectory: Trajectory) -> dict[str, str]:
    return {"instruction": question, "input": "", "output": render_afm_sft(trajectory), "system": system}


def to_afm_rl_row(
    system: str,
    question: str,
    ground_truth: str | Sequence[str],
    *,
    variant: str,
    data_source: str,
    ability: str = "fact-reasoning",
    split: str = "train",
    index: str | None = None,
) -> dict[str, Any]:
    header = "Task:\n" if variant == "code_math" else "Question: "
    content = f"{system.strip()}\n\n{header}{question.strip()}"
    if isinstance(ground_truth, str):
        truth = ground_truth
    else:
        truth = json.dumps({"target": list(ground_truth), "question": question}, ensure_ascii=False)
    if index is None:
        index = f"{data_source}-{hashlib.sha256(content.encode()).hexdigest()[:16]}"
    # Nested keys in sorted order, as in AFM's parquets (so that the Arrow struct types match).
    create = {"data_source": data_source, "ground_truth": truth, "question": question}
    return {
        "data_source": data_source,
        "prompt": [{"content": content, "role": "user"}],
        "ability": ability,
        "reward_model": {"ground_truth": truth, "style": "rule"},
        "extra_info": {
            "index": index,
            "need_tools_kwargs": True,
            "question": question,
            "split": split,
            "tools_kwargs": {tool: {"create_kwargs": dict(create)} for tool in grammar(variant).tools},
        },
    }
