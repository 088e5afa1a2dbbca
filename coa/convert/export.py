"""Exports of converted data: AFM/LLaMA-Factory SFT JSON, AFM RL Parquet, a ``datasets`` folder.

``coa export --format afm-sft|afm-rl|hf URI OUT``:

* ``afm-sft``: a JSON list of alpaca records (``instruction``, ``input``, ``output``, ``system``),
  observations closed by ``</observation>`` + blank line (AFM's masker), from ``sft.v1``;
* ``afm-rl``: AFM's RL Parquet (``data_source``, ``prompt``, ``ability``, ``reward_model``,
  ``extra_info`` with a unique ``index`` per prompt), from ``rl_prompt.v1``;
* ``hf``: a folder of Parquet files with a dataset card declaring two configs, so that
  ``datasets.load_dataset(folder)`` reads the SFT examples (config ``sft``, the default) and
  ``load_dataset(folder, "rl")`` the RL prompts.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coa import io
from coa.format import parse, to_afm_rl_row, to_afm_sft_record

ABILITY = {"math": "math", "code": "coding", "mhqa": "fact-reasoning", "web": "fact-reasoning"}


def afm_sft_records(sft: pa.Table) -> list[dict[str, str]]:
    records = []
    for row in sft.to_pylist():
        by_role = {m["role"]: m["content"] for m in row["messages"]}
        trajectory = parse(by_role["assistant"])
        records.append(to_afm_sft_record(by_role["system"], by_role["user"], trajectory))
    return records


def _ground_truth(row: dict[str, Any]) -> str | list[str]:
    if row["family"] == "code" and row["test_cases"]:
        case = row["test_cases"]
        if case["kind"] == "functional":
            return json.dumps({"functional": case["functional"], "fn_name": case["fn_name"]})
        return json.dumps({"stdin": case["stdin"], "expected_output": case["expected_output"]})
    golds = list(row["gold_answers"])
    return golds[0] if len(golds) == 1 else golds


def afm_rl_table(rl: pa.Table) -> pa.Table:
    rows = []
    for row in rl.to_pylist():
        by_role = {m["role"]: m["content"] for m in row["prompt"]}
        rows.append(
            to_afm_rl_row(
                by_role["system"],
                by_role["user"],
                _ground_truth(row),
                variant=row["variant"],
                data_source=row["task_id"].split(":", 1)[0],
                ability=ABILITY[row["family"]],
                index=f"{row['group_index']}",
            )
        )
    return pa.Table.from_pylist(rows)


def export(uri: str, fmt: str, out: str) -> str:
    """Write the export of artifact ``uri`` in format ``fmt`` to ``out``; returns what was written."""
    ref = io.open_artifact(uri)
    fs, path = io.filesystem(out)
    if fmt == "afm-sft":
        records = afm_sft_records(io.read_table(ref, _table(ref, "sft.v1")))
        fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
        with fs.open(path, "w", encoding="utf-8") as fh:
            json.dump(records, fh, ensure_ascii=False, indent=1)
        return f"{len(records)} SFT records -> {out}"
    if fmt == "afm-rl":
        table = afm_rl_table(io.read_table(ref, _table(ref, "rl_prompt.v1")))
        fs.makedirs(posixpath.dirname(path) or ".", exist_ok=True)
        with fs.open(path, "wb") as fh:
            pq.write_table(table, fh)
        return f"{table.num_rows} RL prompts -> {out}"
    if fmt == "hf":
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
        card = (
            "---\nconfigs:\n"
            + "".join(configs)
            + "---\n\n"
            + (
                f"CoA data exported by coa-pipeline from `{ref.uri}`"
                f" (content hash {ref.content_hash[:16]}).\n"
                "Configs: `sft` (sft.v1 examples) and `rl` (rl_prompt.v1 prompts).\n"
            )
        )
        with fs.open(posixpath.join(path, "README.md"), "w", encoding="utf-8") as fh:
            fh.write(card)
        return f"datasets folder ({', '.join(written)}) -> {out}"
    raise ValueError(f"unknown export format {fmt!r}; use afm-sft, afm-rl or hf")


def _table(ref: io.ArtifactRef, schema_id: str, default: Any = ...) -> Any:
    for name, info in ref.tables.items():
        if info.schema_id == schema_id:
            return name
    if default is not ...:
        return default
    raise io.ArtifactError(f"{ref.uri} has no {schema_id} table (tables: {', '.join(ref.tables)})")
