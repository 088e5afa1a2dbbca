"""Exports of converted data that AFM's own tools and plain TRL read correctly.

``coa export --format afm-sft|afm-rl|hf URI OUT`` (the layouts and the reasons are in
:mod:`coa.format.afm` and :mod:`coa.format.chat`):

* ``afm-sft``: a JSON list of alpaca records ``{instruction: system prompt, input: "\\n" +
  question, output: trajectory}`` from ``sft.v1``, so LLaMA-Factory's one user turn holds the CoA
  rules and the question; observations closed by ``</observation>`` + blank line (AFM's masker).
  A ``dataset_info.json`` beside the file gets (or updates) the entry named after the file's stem,
  with the alpaca columns spelled out: copy both into LLaMA-Factory's ``data/`` folder.
* ``afm-rl``: AFM's RL Parquet from ``rl_prompt.v1``: per row the ``data_source``, ``ability`` and
  ``ground_truth`` shape that AFM's reward routing needs for its family, a globally unique
  ``extra_info.index`` (``{data_source}-{uuid}`` derived from the task, stable across reruns) and
  the variant's tools in ``tools_kwargs``. Rows for different AFM agents (reward manager + tool
  config) cannot share one file: when all rows belong to one agent the file is ``OUT``; otherwise
  one file per agent, ``{stem}.{variant}.{reward_manager}.parquet`` beside ``OUT`` (e.g.
  ``rl.code_math.afm.parquet``: train with ``reward_model.reward_manager=afm`` and AFM's code tool
  config). Rows AFM cannot score (a code task without tests, a task without a gold answer) are
  left out and counted in the returned message.
* ``hf``: a folder of Parquet files with a dataset card declaring two configs (``sft``, the
  default, and ``rl``), plus ``chat_template.jinja``: ChatML whose ``{% generation %}`` blocks hold
  the assistant's own text but not the observations, so plain TRL trains exactly the model's
  tokens with ``SFTConfig(assistant_only_loss=True, chat_template_path=<folder>/chat_template.jinja)``.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coa import io
from coa.format import (
    afm_rl_group,
    afm_sft_dataset_entry,
    afm_target,
    parse,
    to_afm_rl_row,
    to_afm_sft_record,
)
from coa.format.chat import TRAINING_CHAT_TEMPLATE

DATASET_INFO = "dataset_info.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


def afm_sft_records(sft: pa.Table) -> list[dict[str, str]]:
    records = []
    for row in sft.to_pylist():
        by_role = {m["role"]: m["content"] for m in row["messages"]}
        trajectory = parse(by_role["assistant"])
        records.append(to_afm_sft_record(by_role["system"], by_role["user"], trajectory, row["variant"]))
    return records


def afm_rl_groups(rl: pa.Table) -> tuple[dict[str, pa.Table], dict[str, int]]:
    """AFM RL rows grouped by agent (``{variant}.{reward_manager}``), and the skipped rows by reason."""
    groups: dict[str, list[dict[str, Any]]] = {}
    skipped: dict[str, int] = {}
    for row in rl.to_pylist():
        by_role = {m["role"]: m["content"] for m in row["prompt"]}
        question = by_role["user"]
        try:
            target = afm_target(
                row["family"],
                row["task_id"].split(":", 1)[0],
                question,
                row["gold_answers"],
                row["test_cases"],
            )
        except ValueError as e:
            skipped[str(e)] = skipped.get(str(e), 0) + 1
            continue
        afm_row = to_afm_rl_row(
            by_role["system"], question, target, variant=row["variant"], task_id=row["task_id"]
        )
        groups.setdefault(afm_rl_group(row["variant"], target), []).append(afm_row)
    return {name: pa.Table.from_pylist(rows) for name, rows in sorted(groups.items())}, skipped


def _write_dataset_info(fs: Any, path: str) -> str:
    """Add (or replace) the entry of the exported file in ``dataset_info.json`` beside it."""
    info_path = posixpath.join(posixpath.dirname(path) or ".", DATASET_INFO)
    info: dict[str, Any] = {}
    if fs.exists(info_path):
        with fs.open(info_path, "r", encoding="utf-8") as fh:
            info = json.load(fh)
    name = posixpath.splitext(posixpath.basename(path))[0]
    info[name] = afm_sft_dataset_entry(posixpath.basename(path))
    with fs.open(info_path, "w", encoding="utf-8") as fh:
        json.dump(info, fh, ensure_ascii=False, indent=2)
    return name


def _rl_paths(out_path: str, names: Iterable[str]) -> dict[str, str]:
    names = list(names)
    if len(names) == 1:
        return {names[0]: out_path}
    stem, ext = posixpath.splitext(out_path)
    return {name: f"{stem}.{name}{ext or '.parquet'}" for name in names}


def export(uri: str, fmt: str, out: str) -> str:
    """Write the export of artifact ``uri`` in format ``fmt`` to ``out``; returns what was written."""
    ref = io.open_artifact(uri)
    fs, path = io.filesystem(out)
    if fmt == "afm-sft":
        records = afm_sft_records(io.read_table(ref, _table(ref, "sft.v1")))
        fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
        with fs.open(path, "w", encoding="utf-8") as fh:
            json.dump(records, fh, ensure_ascii=False, indent=1)
        name = _write_dataset_info(fs, path)
        return f"{len(records)} SFT records -> {out} (LLaMA-Factory dataset {name!r} in {DATASET_INFO})"
    if fmt == "afm-rl":
        groups, skipped = afm_rl_groups(io.read_table(ref, _table(ref, "rl_prompt.v1")))
        fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
        written = []
        for name, file_path in _rl_paths(path, groups).items():
            with fs.open(file_path, "wb") as fh:
                pq.write_table(groups[name], fh)
            written.append(f"{groups[name].num_rows} RL prompts ({name}) -> {file_path}")
        if skipped:
            written.append("left out: " + "; ".join(f"{n} x {reason}" for reason, n in skipped.items()))
        return "\n".join(written) if written else "no RL prompts to export"
    if fmt == "hf":
        return _export_hf(ref, fs, path, out)
    raise ValueError(f"unknown export format {fmt!r}; use afm-sft, afm-rl or hf")


_CARD_USAGE = """
## Training on the `sft` config with plain TRL

`messages` holds system, user and ONE assistant message with the whole CoA trajectory, tool
output included as `<observation>` segments. The model must not be trained on the prompt or on
tool output. `chat_template.jinja` (ChatML) wraps only the assistant's own text and its
`<|im_end|>` in `{% generation %}` blocks, so TRL's assistant mask leaves out the observations:

```python
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer

ds = load_dataset("FOLDER", "sft", split="train")
args = SFTConfig(assistant_only_loss=True, chat_template_path="FOLDER/chat_template.jinja")
SFTTrainer(model=MODEL, args=args, train_dataset=ds, processing_class=TOKENIZER).train()
```

The tokenizer needs `<|im_start|>` / `<|im_end|>` (Qwen2 tokenizers have them). Without
`assistant_only_loss=True`, or with another template, TRL trains on every token, observations
included. Other trainers can mask from `observation_spans` instead: the character spans
`[start, end)` of the observations (each `<observation>` … `</observation>` and its newline) inside
the assistant content (`messages[-1].content`); a token is trained iff it lies in the assistant
content (or is its end-of-turn token) and none of its characters lies in a span.

Columns of `sft`: `example_id`, `task_id`, `run_id`, `family`, `variant` (CoA grammar), `messages`,
`observation_spans`, `n_tokens` (length under `tokenizer`), `tokenizer`, `prompt_version`.
Columns of `rl`: `prompt_id`, `task_id`, `family`, `variant`, `prompt` (system + user),
`gold_answers`, `test_cases` (code tasks), `group_index`, `teacher_pass_rate`, `n_teacher_runs`.
"""


def _export_hf(ref: io.ArtifactRef, fs: Any, path: str, out: str) -> str:
    written: list[str] = []
    configs: list[str] = []
    fs.makedirs(posixpath.join(path, "data"), exist_ok=True)
    for schema_id, config_name in (("sft.v1", "sft"), ("rl_prompt.v1", "rl")):
        table_name = _table(ref, schema_id, None)
        if table_name is None:
            continue
        data = io.read_table(ref, table_name)
        with fs.open(posixpath.join(path, "data", f"{config_name}-00000.parquet"), "wb") as fh:
            pq.write_table(data.replace_schema_metadata(None), fh)
        default = "    default: true\n" if not configs else ""
        configs.append(
            f"  - config_name: {config_name}\n{default}    data_files:\n"
            f"      - split: train\n        path: data/{config_name}-*.parquet\n"
        )
        written.append(f"{config_name}: {data.num_rows}")
    with fs.open(posixpath.join(path, CHAT_TEMPLATE_FILE), "w", encoding="utf-8") as fh:
        fh.write(TRAINING_CHAT_TEMPLATE)
    card = (
        "---\nconfigs:\n"
        + "".join(configs)
        + "---\n\n"
        + f"CoA data exported by coa-pipeline from `{ref.uri}` (content hash {ref.content_hash[:16]}).\n"
        + "Configs: `sft` (sft.v1 examples, the default) and `rl` (rl_prompt.v1 prompts).\n"
        + _CARD_USAGE
    )
    with fs.open(posixpath.join(path, "README.md"), "w", encoding="utf-8") as fh:
        fh.write(card)
    return f"datasets folder ({', '.join(written)}, {CHAT_TEMPLATE_FILE}) -> {out}"


def _table(ref: io.ArtifactRef, schema_id: str, default: Any = ...) -> Any:
    for name, info in ref.tables.items():
        if info.schema_id == schema_id:
            return name
    if default is not ...:
        return default
    raise io.ArtifactError(f"{ref.uri} has no {schema_id} table (tables: {', '.join(ref.tables)})")
