"""``coa models export``: a model artifact as a Hugging Face model folder with a model card.

The folder holds the model artifact's ``model/`` files as they are (weights, ``config.json``,
tokenizer files, chat template), so ``AutoModelForCausalLM.from_pretrained(OUT)`` and
``push_to_hub`` / ``upload_folder`` take it as is, plus:

* ``README.md``, the model card: YAML metadata (license, ``library_name: transformers``, tags,
  ``base_model`` when the model starts from a hub model, datasets, ``model-index`` with every
  benchmark figure of its evaluation), the benchmark table with intervals, token efficiency against
  the teacher, the training data (counts, quarantine share, decontamination), the lineage, the CoA
  prompt and tool format the model expects, and how to serve it with vLLM;
* ``coa_lineage.json``: the lineage graph (:func:`coa.lineage.trace`) the card was written from.

This module finds what the card reports; :mod:`coa.registry.model_card` writes it.

Every figure comes from a committed artifact; what is not recorded is said to be missing, never
filled in. The evaluation is the one the registry recorded when the model was gated or promoted
(its ``candidate`` evaluation), else the newest ``eval`` artifact whose input model is this model.
The token comparison comes from a training report or evaluation report built on that evaluation.
The folder is written beside ``OUT`` and renamed into place last, so a crash never leaves a folder
that looks complete.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from coa import io
from coa.curate.stats import CurationStats
from coa.errors import UserError
from coa.lineage import EXTERNAL, Graph, trace
from coa.registry.model_card import LINEAGE_FILE, Evaluation, TokenRow, card_metadata, render_card
from coa.registry.store import Registry

CHAMPION_PREFIX = "champion:"
"""How a model is named by its registry name on the command line (as everywhere in ``coa``)."""
CARD_FILE = "README.md"


@dataclasses.dataclass(frozen=True)
class ExportResult:
    out: str
    model_uri: str
    evaluation: str | None
    files: tuple[str, ...]


# -- finding what the card reports -------------------------------------------------------------


def resolve(value: str, registry: Registry) -> tuple[io.ArtifactRef, str | None]:
    """The model artifact ``value`` names (a URI or ``champion:NAME``) and the registry name."""
    name = None
    if value.startswith(CHAMPION_PREFIX):
        name = value.removeprefix(CHAMPION_PREFIX)
        value = registry.resolve(name)
    ref = io.lookup(value)
    if ref is None:
        raise UserError(
            f"{value} is not a committed model artifact: export needs one (its lineage and evaluation "
            "make the card); pass a model URI or champion:NAME"
        )
    if ref.kind != "model" or not any(f.startswith("model/") for f in ref.files):
        raise UserError(f"{ref.uri} is a {ref.kind} artifact without a model/ folder, not a model")
    return ref, name


def _committed(root: str, kind: str) -> Iterator[tuple[io.ArtifactRef, dict[str, Any]]]:
    """Every committed artifact of ``kind`` in the store, with its lineage."""
    fs, path = io.filesystem(io.join(root, kind))
    if not fs.exists(path):
        return
    for entry in sorted(fs.ls(path, detail=False)):
        if posixpath.basename(entry.rstrip("/")).startswith("."):
            continue
        ref = io.lookup(io.join(root, kind, posixpath.basename(entry.rstrip("/"))))
        if ref is not None:
            yield ref, io.read_lineage(ref)


def _input_uri(lineage: Mapping[str, Any], role: str) -> str | None:
    value = (lineage.get("inputs") or {}).get(role) or {}
    uri = value.get("uri")
    return str(uri).rstrip("/") if uri else None


def find_evaluation(model: io.ArtifactRef, registry: Registry, root: str) -> Evaluation | None:
    """The registry's recorded evaluation of ``model`` (newest), else the newest eval artifact of it."""
    for name in registry.names():
        for entry in reversed(registry.history(name)):
            uri = entry.evaluations.get("candidate")
            if entry.model_uri.rstrip("/") == model.uri and uri and io.lookup(uri) is not None:
                return Evaluation(uri, _metrics(uri), f"registry `{name}`, entry {entry.id} ({entry.event})")
    found = [
        (str(lineage.get("created_at", "")), ref.uri)
        for ref, lineage in _committed(root, "eval")
        if _input_uri(lineage, "model") == model.uri and "metrics.json" in ref.files
    ]
    if not found:
        return None
    uri = max(found)[1]
    return Evaluation(uri, _metrics(uri), "the newest evaluation artifact whose input model is this model")


def _metrics(uri: str) -> dict[str, Any]:
    try:
        return dict(json.loads(io.read_file(uri, "metrics.json")))
    except (FileNotFoundError, io.ArtifactError) as e:
        raise UserError(f"evaluation {uri} has no readable metrics.json ({e})") from None


def token_comparison(eval_uri: str, root: str) -> tuple[list[TokenRow], str] | None:
    """Student vs teacher tokens per task from a report built on ``eval_uri`` (newest first)."""
    candidates: list[tuple[str, list[TokenRow], str]] = []
    for ref, lineage in _committed(root, "eval-report"):
        if _input_uri(lineage, "candidate") != eval_uri or "comparison.json" not in ref.files:
            continue
        rows = [
            TokenRow(r["benchmark"], r["student_tokens_per_task"], r["teacher_tokens_per_task"])
            for r in json.loads(io.read_file(ref, "comparison.json")).get("tokens") or []
            if r.get("student_tokens_per_task") is not None and r.get("teacher_tokens_per_task")
        ]
        candidates.append((str(lineage.get("created_at", "")), rows, ref.uri))
    for ref, lineage in _committed(root, "report"):
        role = next((r for r in ("after_rl", "after") if _input_uri(lineage, r) == eval_uri), None)
        if role is None or "comparison.json" not in ref.files:
            continue
        key = "tokens_per_task_after_rl" if role == "after_rl" else "tokens_per_task_after"
        rows = [
            TokenRow(r["family"], r[key], r["teacher_tokens_per_task"])
            for r in json.loads(io.read_file(ref, "comparison.json"))
            if r.get(key) is not None and r.get("teacher_tokens_per_task")
        ]
        candidates.append((str(lineage.get("created_at", "")), rows, ref.uri))
    usable = [c for c in candidates if c[1]]
    if not usable:
        return None
    _, rows, uri = max(usable, key=lambda c: c[0])
    return rows, uri


# -- the training data, from the lineage ---------------------------------------------------------


def training_data(graph: Graph) -> list[str]:
    """Markdown lines: tasks, teacher runs, curation (quarantine, decontamination), SFT/RL examples."""
    lines: list[str] = []
    for node in graph.walk():
        if node.kind in (EXTERNAL, "eval"):  # an evaluation the RL step read to pick its family
            continue
        rows = ", ".join(f"{t} {n:,}" for t, n in node.tables.items())
        step = node.step or node.kind
        if step.startswith("curate"):
            lines += _curation(node.uri, node.config, node.checks.get("gate"))
        elif step in ("sft", "rl") or step.startswith(("sft.", "rl.")):
            planned, run = node.checks.get("steps_planned"), node.checks.get("steps_run")
            steps = f"; optimizer steps {run:,} of {planned:,} planned" if planned and run else ""
            lines.append(f"- **{step}** `{node.uri}`{steps}")
        elif rows:
            lines.append(f"- **{step}** `{node.uri}`: {rows}")
        for source in node.sources:
            lines.append(f"    - source `{source.get('path')}` (sha256 `{str(source.get('sha256'))[:16]}…`)")
    return lines


def _curation(uri: str, config: Any, gate: Any) -> list[str]:
    ref = io.lookup(uri)
    summary = (
        CurationStats.from_dict(json.loads(io.read_file(ref, "summary.json")))
        if ref and "summary.json" in ref.files
        else None
    )
    benchmarks = list(((config or {}).get("decontam") or {}).get("benchmarks") or [])
    against = ", ".join(f"`{b}`" for b in benchmarks) if benchmarks else "no benchmark set (none configured)"
    if summary is None:
        return [f"- **curate** `{uri}`: no summary recorded; decontaminated against {against}"]
    n_in, kept, out = summary.rows_in, summary.rows_kept, summary.rows_quarantined
    reasons = summary.reasons
    contaminated = sum(v for k, v in reasons.items() if k.startswith("contaminated_"))
    top = ", ".join(f"{k} {v:,}" for k, v in list(reasons.items())[:6])
    share = f"{out / n_in:.1%}" if n_in else "n/a"
    gate_text = "passed" if (gate or {}).get("success") else "not passed" if gate else "not recorded"
    return [
        f"- **curate** `{uri}`: {n_in:,} teacher runs in, {kept:,} kept, {out:,} quarantined "
        f"({share}){': ' + top if top else ''}; data-quality gate {gate_text}",
        f"    - decontamination against {against}: {contaminated:,} runs quarantined as contaminated",
    ]


def base_models(graph: Graph) -> list[str]:
    """External models in the lineage that are hub ids (not local folders)."""
    out = []
    for node in graph.of_kind(EXTERNAL):
        name = node.name
        if name.startswith(("/", ".", "~")) or os.path.exists(name) or "://" in name or "/" not in name:
            continue
        out.append(name)
    return sorted(set(out))


def trained_families(graph: Graph) -> set[str] | None:
    """The families the SFT steps in the lineage trained on (``sft.families``); None = every family."""
    found: set[str] = set()
    for node in graph.walk():
        if (node.step or "").split(".")[0] == "sft" and isinstance(node.config, dict):
            families = node.config.get("families")
            if not families:
                return None
            found |= set(families)
    return found or None


def prompt_formats(graph: Graph) -> list[tuple[str, str, str]]:
    """(variant, prompt version, system prompt) of the SFT examples the model was trained on, as the
    examples hold them (the first example of each variant and version, of the trained families)."""
    families = trained_families(graph)
    found: dict[tuple[str, str], str] = {}
    for node in graph.walk():
        if node.kind != EXTERNAL and "sft" in node.tables and (node.step or "").startswith("convert"):
            columns = ["family", "variant", "prompt_version", "messages"]
            for row in io.read_table(node.uri, "sft", columns=columns).to_pylist():
                key = (row["variant"], row["prompt_version"])
                if key in found or (families is not None and row["family"] not in families):
                    continue
                system = [m["content"] for m in row["messages"] if m["role"] == "system"]
                found[key] = system[0] if system else ""
    return [(v, version, text) for (v, version), text in sorted(found.items())]


def task_sources(graph: Graph) -> list[str]:
    """The ``source`` names of the task tables in the lineage (the card's ``datasets``)."""
    names: set[str] = set()
    for node in graph.walk():
        if node.kind == "tasks" or (node.step or "") in ("synthetic", "tasks"):
            for table in node.tables:
                if table == "quarantine":
                    continue
                try:
                    names |= set(
                        io.read_table(node.uri, table, columns=["source"]).column("source").to_pylist()
                    )
                except (KeyError, ValueError, io.ArtifactError):
                    continue
    return sorted(n for n in names if n)


# -- the command -------------------------------------------------------------------------------


def portable(text: str, root: str) -> str:
    """``text`` with the local store's absolute root left out of every artifact path (``/home/me/
    store/models/sft-1a2b`` -> ``models/sft-1a2b``, relative to the store): an exported folder
    travels, this machine's paths stay here. A remote store's URIs (``s3://…``) name the same place
    everywhere and are kept."""
    if "://" in root:
        return text
    prefix = root.rstrip("/") + "/"
    return text.replace(prefix, "")


def export_model(
    value: str, out: str, license_id: str | None = None, registry: Registry | None = None
) -> ExportResult:
    """Write the model ``value`` names (URI or ``champion:NAME``) with its card to the folder ``out``."""
    registry = registry or Registry()
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(f"{out} exists and is not an empty folder: choose a new OUT")
    ref, name = resolve(value, registry)
    root = registry.uri.rsplit("/", 1)[0]
    graph = trace(ref.uri)
    evaluation = find_evaluation(ref, registry, root)
    tokens = token_comparison(evaluation.uri, root) if evaluation else None
    base = base_models(graph)
    families = sorted(
        f for f in ((evaluation.metrics.get("families") or {}) if evaluation else {}) if f != "all"
    )
    license_id = license_id or ("other" if base else "apache-2.0")
    metadata = card_metadata(name or ref.name, evaluation, license_id, base, task_sources(graph), families)
    training, formats = training_data(graph), prompt_formats(graph)
    card = render_card(ref, name, evaluation, tokens, graph, metadata, target.name, training, formats)
    stage = target.parent / f".{target.name}.partial-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(io.local_folder(ref, "model"), stage)
        (stage / CARD_FILE).write_text(portable(card, root), encoding="utf-8")
        (stage / LINEAGE_FILE).write_text(
            portable(json.dumps(graph.to_dict(), indent=2, default=str), root), encoding="utf-8"
        )
        if target.exists():
            target.rmdir()
        stage.rename(target)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    files = tuple(sorted(p.name for p in target.iterdir()))
    return ExportResult(str(target), ref.uri, evaluation.uri if evaluation else None, files)
