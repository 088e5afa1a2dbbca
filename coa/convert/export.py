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
  default, and ``rl``), the same tables as a ``DatasetDict`` saved with ``save_to_disk`` (so both
  ``load_dataset(OUT, "sft")`` and ``load_from_disk(OUT)`` read it), plus ``chat_template.jinja``:
  ChatML whose ``{% generation %}`` blocks hold the assistant's own text but not the observations,
  so plain TRL trains exactly the model's tokens with ``SFTConfig(assistant_only_loss=True,
  chat_template_path=<folder>/chat_template.jinja)`` (and ``bf16=False`` on a CPU).
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
    to_mhqa,
)
from coa.format.chat import TRAINING_CHAT_TEMPLATE
from coa.format.prompts import system_prompt

DATASET_INFO = "dataset_info.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"


GRAMMARS = ("mhqa",)
"""Grammars an AFM export can render its multi-hop rows in (``--grammar``): ``mhqa`` is AFM's MHQA
agent's (``<wiki_search>``, no suggested answer or double check; :func:`coa.format.to_mhqa`)."""


def _mhqa_system(system: str, variant: str) -> str:
    """The ``mhqa`` variant's system prompt in the style (full or brief) of the row's ``system``."""
    brief = system.strip() == system_prompt(variant, "brief")[0].strip()
    return system_prompt("mhqa", "brief" if brief else "full")[0]


def afm_sft_records(sft: pa.Table, grammar: str | None = None) -> tuple[list[dict[str, str]], dict[str, int]]:
    """AFM alpaca records, and the rows left out by reason (only ``grammar`` leaves rows out).

    With ``grammar="mhqa"`` the ``mhqa`` family's ``web`` rows are rendered in AFM's MHQA grammar
    with the ``mhqa`` variant's system prompt; rows that cannot be are left out and counted."""
    records: list[dict[str, str]] = []
    skipped: dict[str, int] = {}
    for row in sft.to_pylist():
        by_role = {m["role"]: m["content"] for m in row["messages"]}
        trajectory, variant, system = parse(by_role["assistant"]), row["variant"], by_role["system"]
        if grammar == "mhqa" and row["family"] == "mhqa" and variant == "web":
            try:
                trajectory = to_mhqa(trajectory)
            except ValueError as e:
                skipped[str(e)] = skipped.get(str(e), 0) + 1
                continue
            variant, system = "mhqa", _mhqa_system(system, variant)
        records.append(to_afm_sft_record(system, by_role["user"], trajectory, variant))
    return records, skipped


def afm_rl_groups(rl: pa.Table, grammar: str | None = None) -> tuple[dict[str, pa.Table], dict[str, int]]:
    """AFM RL rows grouped by agent (``{variant}.{reward_manager}``), and the skipped rows by reason.

    With ``grammar="mhqa"`` the ``mhqa`` family's prompts use the ``mhqa`` variant (its system
    prompt, ``wiki_search`` in ``tools_kwargs``): AFM's MHQA agent's file."""
    groups: dict[str, list[dict[str, Any]]] = {}
    skipped: dict[str, int] = {}
    for row in rl.to_pylist():
        by_role = {m["role"]: m["content"] for m in row["prompt"]}
        question, system, variant = by_role["user"], by_role["system"], row["variant"]
        if grammar == "mhqa" and row["family"] == "mhqa" and variant == "web":
            variant, system = "mhqa", _mhqa_system(system, variant)
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
        afm_row = to_afm_rl_row(system, question, target, variant=variant, task_id=row["task_id"])
        groups.setdefault(afm_rl_group(variant, target), []).append(afm_row)
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


def export(uri: str, fmt: str, out: str, grammar: str | None = None) -> str:
    """Write the export of artifact ``uri`` in format ``fmt`` to ``out``; returns what was written.

    ``grammar`` (AFM formats only): ``mhqa`` renders the multi-hop rows for AFM's MHQA agent."""
    if grammar is not None and grammar not in GRAMMARS:
        raise ValueError(f"unknown grammar {grammar!r}; use one of: {', '.join(GRAMMARS)}")
    if grammar is not None and fmt not in ("afm-sft", "afm-rl"):
        raise ValueError(f"--grammar applies to the AFM formats (afm-sft, afm-rl), not {fmt}")
    ref = io.open_artifact(uri)
    fs, path = io.filesystem(out)
    if fmt == "afm-sft":
        records, left_out = afm_sft_records(io.read_table(ref, _table(ref, "sft.v1")), grammar)
        fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
        with fs.open(path, "w", encoding="utf-8") as fh:
            json.dump(records, fh, ensure_ascii=False, indent=1)
        name = _write_dataset_info(fs, path)
        message = f"{len(records)} SFT records -> {out} (LLaMA-Factory dataset {name!r} in {DATASET_INFO})"
        return message + (f"\n{_left_out(left_out)}" if left_out else "")
    if fmt == "afm-rl":
        groups, skipped = afm_rl_groups(io.read_table(ref, _table(ref, "rl_prompt.v1")), grammar)
        fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
        written = []
        for name, file_path in _rl_paths(path, groups).items():
            with fs.open(file_path, "wb") as fh:
                pq.write_table(groups[name], fh)
            written.append(f"{groups[name].num_rows} RL prompts ({name}) -> {file_path}")
        if skipped:
            written.append(_left_out(skipped))
        return "\n".join(written) if written else "no RL prompts to export"
    if fmt == "hf":
        return _export_hf(ref, fs, path, out)
    raise ValueError(f"unknown export format {fmt!r}; use afm-sft, afm-rl or hf")


def _left_out(reasons: dict[str, int]) -> str:
    return "left out: " + "; ".join(f"{n} x {reason}" for reason, n in reasons.items())


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
args = SFTConfig(
    assistant_only_loss=True,
    chat_template_path="FOLDER/chat_template.jinja",
    bf16=False,  # on a CPU; drop it on a GPU with bf16 (TRL defaults to bf16 and stops on a CPU)
)
SFTTrainer(model=MODEL, args=args, train_dataset=ds, processing_class=TOKENIZER).train()
```

The folder loads both ways: `load_dataset("FOLDER", "sft", split="train")` (the Parquet configs
above; `datasets` caches a local folder by its name, not its path, so load a re-export with a fresh
`cache_dir`) and `load_from_disk("FOLDER")`, a `DatasetDict` with `sft` and `rl` (the same rows
saved with `save_to_disk` into `sft/` and `rl/`).

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
    splits: dict[str, pa.Table] = {}
    fs.makedirs(posixpath.join(path, "data"), exist_ok=True)
    for schema_id, config_name in (("sft.v1", "sft"), ("rl_prompt.v1", "rl")):
        table_name = _table(ref, schema_id, None)
        if table_name is None:
            continue
        data = io.read_table(ref, table_name)
        splits[config_name] = data.replace_schema_metadata(None)
        with fs.open(posixpath.join(path, "data", f"{config_name}-00000.parquet"), "wb") as fh:
            pq.write_table(splits[config_name], fh)
        default = "    default: true\n" if not configs else ""
        configs.append(
            f"  - config_name: {config_name}\n{default}    data_files:\n"
            f"      - split: train\n        path: data/{config_name}-*.parquet\n"
        )
        written.append(f"{config_name}: {data.num_rows}")
    _save_to_disk_layout(splits, out)
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


def _save_to_disk_layout(splits: dict[str, pa.Table], out: str) -> None:
    """The same tables as a ``DatasetDict`` saved with ``save_to_disk`` (``dataset_dict.json`` and one
    Arrow folder per config), so ``datasets.load_from_disk(OUT)`` reads the folder too. It sits beside
    the Parquet configs: ``load_dataset(OUT, "sft")`` reads those (it refuses only a root
    ``state.json``, which a single saved ``Dataset`` would write, not a ``DatasetDict``)."""
    import datasets
    from datasets.table import InMemoryTable

    from coa.settings import Settings

    if not splits:
        return
    from datasets.utils import logging as ds_logging

    layout = datasets.DatasetDict({name: datasets.Dataset(InMemoryTable(t)) for name, t in splits.items()})
    bars = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()  # the command prints one line per export, not a bar per split
    try:
        layout.save_to_disk(out, storage_options=Settings.from_env().storage_options(out) or None)
    finally:
        if bars:
            ds_logging.enable_progress_bar()


def _table(ref: io.ArtifactRef, schema_id: str, default: Any = ...) -> Any:
    for name, info in ref.tables.items():
        if info.schema_id == schema_id:
            return name
    if default is not ...:
        return default
    raise io.ArtifactError(f"{ref.uri} has no {schema_id} table (tables: {', '.join(ref.tables)})")
