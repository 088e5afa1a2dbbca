"""The model card ``coa models export`` writes (:mod:`coa.registry.model_export` finds what it reports).

:func:`card_metadata` is the YAML header (huggingface_hub's ``ModelCardData``, ``model-index`` with
every benchmark figure); :func:`render_card` the text: the benchmark table with 95% intervals, token
efficiency against the teacher, the training data, the CoA prompt and tool format, how to serve it
with vLLM and the lineage. It states only the figures it is given; a missing one is said missing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from coa import io
from coa.lineage import Graph, format_tree

LINEAGE_FILE = "coa_lineage.json"
"""The lineage graph as JSON, beside the card in the exported folder."""
Z95 = 1.959963984540054
"""Two-sided 95% quantile of the normal distribution (the card's pass@1 interval)."""
METRIC_ORDER = ("pass@1", "pass@1_se", "format_valid", "tokens_per_task", "total_tokens_per_task",
                "tool_calls_per_task", "tokens_per_solved", "cost_of_pass")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The evaluation a card reports: its artifact, its ``metrics.json`` and how it was found."""

    uri: str
    metrics: dict[str, Any]
    found: str


@dataclasses.dataclass(frozen=True)
class TokenRow:
    """The student's and the teacher's tokens per task on one benchmark or family."""

    label: str
    student: float
    teacher: float

    @property
    def reduction(self) -> float:
        return 1.0 - self.student / self.teacher


# -- the sections ---------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def interval(m: Mapping[str, Any]) -> tuple[float, float] | None:
    """The 95% normal interval of pass@1 over tasks (pass@1 ± 1.96 SE), clipped to [0, 1]."""
    p, se = m.get("pass@1"), m.get("pass@1_se")
    if p is None or se is None or math.isnan(se):
        return None
    return max(0.0, p - Z95 * se), min(1.0, p + Z95 * se)


def benchmark_table(benchmarks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The figures of each benchmark (or family) as a Markdown table, ``all`` last."""
    benchmarks = {k: benchmarks[k] for k in sorted(benchmarks, key=lambda k: (k == "all", k))}
    found = {k for m in benchmarks.values() for k in m}
    passes = sorted((k for k in found if k.startswith("pass@") and k[5:].isdigit() and k != "pass@1"),
                    key=lambda k: int(k[5:]))  # fmt: skip
    ks = passes + sorted(k for k in found if k.startswith("maj@"))
    header = ["benchmark", "tasks", "samples", "pass@1 ± SE", "95% interval", *ks, "format-valid",
              "tokens/task", "tool calls/task"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, m in benchmarks.items():
        if not m.get("runs"):
            continue
        se = m.get("pass@1_se")
        ci = interval(m)
        cells = [
            name, str(m["tasks"]), str(m["samples"]),
            _pct(m["pass@1"]) + ("" if se is None else f" ± {_pct(se)}"),
            "n/a" if ci is None else f"[{_pct(ci[0])}, {_pct(ci[1])}]",
            *[_pct(m.get(k)) for k in ks],
            _pct(m.get("format_valid")), _num(m.get("tokens_per_task")), _num(m.get("tool_calls_per_task")),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def card_metadata(
    model_name: str,
    evaluation: Evaluation | None,
    license_id: str,
    base: Sequence[str],
    datasets: Sequence[str],
    families: Sequence[str],
) -> Any:
    """The card's YAML metadata (huggingface_hub's ``ModelCardData``), ``model-index`` included."""
    from huggingface_hub import EvalResult, ModelCardData

    results = []
    for bench, m in ((evaluation.metrics.get("benchmarks") or {}) if evaluation else {}).items():
        if not m.get("runs"):
            continue
        keys = [k for k in METRIC_ORDER if k in m] + sorted(
            k for k in m if k.startswith(("pass@", "maj@")) and k not in METRIC_ORDER
        )
        for key in keys:
            if m.get(key) is None:
                continue
            results.append(
                EvalResult(
                    task_type="text-generation",
                    task_name="Chain-of-Agents agentic tasks",
                    dataset_type=bench,
                    dataset_name=bench,
                    metric_type=key,
                    metric_name=key,
                    metric_value=m[key],
                )
            )
    return ModelCardData(
        license=license_id,
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=["coa-pipeline", "chain-of-agents", "agent", "tool-use", *families],
        base_model=list(base) or None,
        datasets=list(datasets) or None,
        model_name=model_name,
        eval_results=results or None,
    )


def _prompt_section(formats: Sequence[tuple[str, str, str]]) -> list[str]:
    from coa.format.grammar import grammar
    from coa.rollout import STOP_TAGS

    if not formats:
        return [
            "The SFT examples of this model are not in its lineage: the prompt it was trained on is unknown.",
            "",
        ]
    lines = [
        "The model writes one Chain-of-Agents trajectory: blocks `<tag>\\n…\\n</tag>\\n` in the order its "
        "grammar allows. After a tool block closes, the environment runs the tool and appends "
        "`<observation>\\n…\\n</observation>\\n`; the model never writes an observation. Stop "
        f"generation at {', '.join(f'`{t}`' for t in STOP_TAGS)} and at the end of turn "
        "(`<|im_end|>`, ChatML). The system prompt goes in the system turn, the question in the user turn.",
        "",
    ]
    for variant, version, text in formats:
        tools = ", ".join(f"`<{t}>`" for t in grammar(variant).tools) or "none"
        lines += [
            f"**Variant `{variant}`** (prompt `{version}`; tools {tools}). The system prompt of its "
            "training examples:",
            "",
            "```text",
            text,
            "```",
            "",
        ]
    return lines


def render_card(
    model: io.ArtifactRef,
    name: str | None,
    evaluation: Evaluation | None,
    tokens: tuple[list[TokenRow], str] | None,
    graph: Graph,
    metadata: Any,
    folder: str,
    training: Sequence[str],
    formats: Sequence[tuple[str, str, str]],
) -> str:
    """The card's text: ``metadata`` as its YAML header, then the sections (``training``: the lineage's
    training-data lines, ``formats``: the CoA variants and system prompts the model was trained on)."""
    from huggingface_hub import ModelCard

    title = name or model.name
    body = [
        f"# {title}",
        "",
        "A Chain-of-Agents agent model ([arXiv 2508.13167](https://arxiv.org/abs/2508.13167)) trained by "
        "coa-pipeline: a multi-agent teacher's runs, curated and converted into single-model CoA "
        f"trajectories, then SFT (and RL where the lineage below shows it). Model artifact: `{model.uri}`"
        + (f"; registry name `{name}`." if name else "."),
        "",
        "## Evaluation",
        "",
    ]
    if evaluation is None:
        body += ["No evaluation artifact of this model was found: the card states no benchmark figure.", ""]
    else:
        body += [
            f"From the evaluation artifact `{evaluation.uri}` ({evaluation.found}). pass@1 is the mean "
            "correctness over all samples (avg@K) ± its standard error over tasks; the interval is "
            "pass@1 ± 1.96 SE (normal approximation, clipped to [0, 100%]); pass@k is the unbiased "
            "estimator; maj@K a majority vote over the K samples.",
            "",
            *benchmark_table(evaluation.metrics.get("benchmarks") or {}),
            "",
        ]
        families = {k: v for k, v in (evaluation.metrics.get("families") or {}).items()}
        if families:
            body += ["Per task family:", "", *benchmark_table(families), ""]
    body += ["## Token efficiency against the teacher", ""]
    if tokens is None:
        body += ["No report compared this evaluation with the teacher's runs on the same tasks.", ""]
    else:
        rows, uri = tokens
        body += [
            f"From `{uri}`: the student's tokens per task (one pass: prompt, generated tokens and the "
            "observations it reads, its own tokenizer) against the multi-agent teacher's (every token its "
            "agents sent and received).",
            "",
            "| benchmark / family | student tokens/task | teacher tokens/task | reduction |",
            "|---|---|---|---|",
            *[f"| {r.label} | {_num(r.student)} | {_num(r.teacher)} | {_pct(r.reduction)} |" for r in rows],
            "",
        ]
    body += [
        "## Training data",
        "",
        "From the model's lineage, from the model back to its task sources:",
        "",
        *training,
        "",
    ]
    body += ["## Prompt and tool format", "", *_prompt_section(formats)]
    served = folder
    body += [
        "## Serving with vLLM",
        "",
        "```bash",
        f"vllm serve ./{served} --served-model-name {served}",
        "```",
        "",
        "The CoA loop (generate until a tool tag closes, run the tool, append the observation, go on) is "
        "coa-pipeline's rollout engine; point its evaluation at the server:",
        "",
        "```bash",
        f"coa evaluate --model ./{served} --tasks <tasks URI> evaluate.backend=endpoint \\",
        f"    evaluate.endpoint.name=vllm evaluate.endpoint.model={served} \\",
        "    evaluate.endpoint.base_url=http://127.0.0.1:8000/v1",
        "```",
        "",
        "## Lineage",
        "",
        "```text",
        format_tree(graph),
        "```",
        "",
        f"The graph as JSON: `{LINEAGE_FILE}`.",
    ]
    card = ModelCard(f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(body) + "\n")
    return str(card)
