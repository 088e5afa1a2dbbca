"""How much the demo's held-out result depends on luck: the demo's student trained under N seeds.

For each seed S the demo's plan (``configs/demo.yaml`` + overrides) runs up to ``evaluate.after``
with ``synthetic.seed=S`` (the tasks, so the teacher's data), ``student.tiny.seed=S`` (the weight
initialisation) and ``sft.seed=S`` (the data order); ``--fixed-data`` keeps ``synthetic.seed`` at
the profile's value, so only the initialisation and the order vary. RL, the teacher on the held-out
tasks and the report are left out (``rl=null``): the question is the SFT model's spread. Steps run
through the one runner (:func:`coa.steps.run_step`) in the store of ``COA_STORAGE_ROOT``, so a
rerun reuses every committed artifact (only new seeds cost time).

The table: held-out accuracy and format-valid share per family for each seed, then the mean, the
sample standard deviation, min and max over seeds, and the SFT steps per minute each run measured
(``sft_result.json``: steps run / training-loop wall time). Below it, where each seed's held-out
*math* misses come from (:func:`math_misses`): the expression restated wrongly (an operator or an
operand not copied from the question), the printed value miscopied into the answer, no program;
and where its *multi-hop* misses come from (:func:`multihop_misses`): a first search without the
question's start entity, a hop's object that is the hop's subject again or a name not in the
observation, an answer that is not the chain's last object; and where its *programming* misses come
from (:func:`code_misses`): the answer's program against the reference program of the question's
problem, literal for literal (the right program with the words or the numbers miscopied, another
problem's program, a program otherwise wrong, no program).
``--json`` writes it all in the run's record.

``--quick`` is a smoke run on tiny sizes (a few tasks per family, a 1-layer student, 4 SFT steps,
8-token generations): it checks the machinery and prints a table whose numbers mean nothing.

    python bench/bench_demo_seeds.py [--config configs/demo.yaml] [key=value ...] [--seeds 0,1,2] \\
        [--fixed-data] [--json seeds.json] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import io as stdio
import json
import math
import re
import statistics
import time
import token
import tokenize
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness import Bench, main

from coa import io
from coa.format.answers import extract_code_block
from coa.format.masks import observation_spans
from coa.plan import load_pipeline_config, plan
from coa.steps import StepResult, run_step
from coa.synthetic import multihop, programming
from coa.synthetic.program_specs import SPECS

LAST = "evaluate.after"
EXPRESSION = re.compile(r"-?\d+(?: [-+*/] -?\d+)+")
PRINTED = re.compile(r"\[STDOUT:BEGIN\]\n(.*?)\n\[STDOUT:END\]", re.S)
BOXED = re.compile(r"\\boxed\{([^}]*)\}")
MISS_KINDS = (
    "operator miscopied",
    "operand miscopied",
    "expression otherwise wrong",
    "printed value miscopied",
    "no program",
    "other",
)
"""Kinds of a wrong held-out arithmetic answer, in the order the student writes: the expression the
code computes (copied from the question: operators, operands), then the answer (copied from what
the program printed)."""
QUICK = [
    "synthetic.train={arithmetic: 6, multihop: 6, programming: 3}",
    "synthetic.heldout={arithmetic: 3, multihop: 2, programming: 2}",
    "curate.gate.correctness_floor=0.3",
    "student.tiny={vocab_size: 400, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 2, "
    "intermediate_size: 64}",
    "sft.time_budget_s=null",
    "sft.max_steps=4",
    "sft.save_steps=2",
    "sft.logging_steps=1",
    "evaluate.max_turns=2",
    "evaluate.max_new_tokens=8",
    "evaluate.max_total_tokens=16",
]


def classify_math_miss(question: str, text: str, prediction: str | None) -> str:
    """Why a wrong arithmetic answer is wrong (one of :data:`MISS_KINDS`), read from the episode."""
    code = text.split("<code>", 1)[1].split("</code>", 1)[0] if "<code>" in text else ""
    asked, computed = EXPRESSION.search(question), EXPRESSION.search(code)
    if computed is None:
        return "no program"
    if asked is not None and asked.group(0) != computed.group(0):
        a, c = asked.group(0).split(), computed.group(0).split()
        if len(a) == len(c) and a[0::2] == c[0::2]:
            return "operator miscopied"
        if len(a) == len(c) and a[1::2] == c[1::2]:
            return "operand miscopied"
        return "expression otherwise wrong"
    printed, boxed = PRINTED.search(text), BOXED.search(prediction or "")
    if printed is not None and (boxed is None or boxed.group(1).strip() != printed.group(1).strip()):
        return "printed value miscopied"
    return "other"


HOP = re.compile(r"So the [a-z ]+? (?:of|by) (.+?) is (.+?)\.\n")
OBSERVATION = re.compile(r"<observation>(.*?)</observation>", re.S)
HOP_MISS_KINDS = (
    "no answer",
    "no search",
    "start entity miscopied",
    "subject restated as the object",
    "object not in the observation",
    "answer not the chain's last object",
    "other",
)
"""Kinds of a wrong held-out multi-hop answer, in the order the student writes: a search, then per
hop ``So <relation> of <subject> is <object>.`` (the object copied out of the observation before
it), then the answer (the last hop's object)."""
START_KINDS = ("a token never written", "every token written")
"""A held-out start entity's name, by whether SFT ever trained the student to write each of its tokens."""


def classify_multihop_miss(question: str, text: str, prediction: str | None) -> str:
    """Why a wrong multi-hop answer is wrong (one of :data:`HOP_MISS_KINDS`), read from the episode:
    a first search without the question's start entity, the first hop whose object is the hop's own
    subject or a name the observation before it does not hold; else an answer that is not the
    chain's last object."""
    if prediction is None:
        return "no answer"
    if "<web_search>" not in text:
        return "no search"
    try:
        start = multihop.parse_question(question)["start"]
    except ValueError:
        start = None
    first_search = text.split("<web_search>", 1)[1].split("</web_search>", 1)[0]
    if start is not None and start not in first_search:
        return "start entity miscopied"
    last = None
    for hop in HOP.finditer(text):
        subject, obj = hop.group(1), hop.group(2)
        seen = OBSERVATION.findall(text[: hop.start()])
        if obj == subject:
            return "subject restated as the object"
        if not seen or obj not in seen[-1]:
            return "object not in the observation"
        last = obj
    if last is not None and prediction.strip() != last:
        return "answer not the chain's last object"
    return "other"


def multihop_misses(rows: Iterable[dict[str, Any]], questions: dict[str, str]) -> dict[str, int]:
    """Counts of :data:`HOP_MISS_KINDS` over the wrong ``mhqa`` rows of ``eval.v1`` (``questions``:
    task_id → question)."""
    kinds = Counter(
        classify_multihop_miss(questions.get(row["task_id"], ""), row["text"] or "", row["prediction"])
        for row in rows
        if row["family"] == "mhqa" and not row["correct"]
    )
    return {k: kinds[k] for k in HOP_MISS_KINDS if kinds[k]}


CODE_MISS_KINDS = (
    "no program",
    "words miscopied",
    "numbers miscopied",
    "words and numbers miscopied",
    "another problem's program",
    "program otherwise wrong",
    "other",
)
"""Kinds of a wrong held-out programming answer: the answer's program read against the reference
program of the question's problem (:mod:`coa.synthetic.programming`), with its string and number
literals set apart: the right program whose words (string literals) or numbers were not copied from
the question, the program of another problem (its shape is another spec's), or another shape."""


def _shape(source: str) -> tuple[tuple[str, ...], list[str], list[str]] | None:
    """A program's tokens with every string and number literal replaced by a placeholder, and the
    string and number literals in order; None when it does not tokenize."""
    shape: list[str] = []
    strings: list[str] = []
    numbers: list[str] = []
    try:
        for tok in tokenize.generate_tokens(stdio.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER):
                continue
            if tok.type == token.STRING:
                strings.append(tok.string)
                shape.append("<str>")
            elif tok.type == token.NUMBER:
                numbers.append(tok.string)
                shape.append("<num>")
            else:
                shape.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return tuple(shape), strings, numbers


@functools.lru_cache(maxsize=1)
def _spec_shapes() -> dict[tuple[str, ...], str]:
    """Program shape → the spec whose reference programs have it (over every spec's parameters)."""
    out: dict[tuple[str, ...], str] = {}
    for spec in SPECS.values():
        for params in spec.space():
            shaped = _shape(spec.source(params))
            if shaped is not None:
                out.setdefault(shaped[0], spec.id)
    return out


def classify_code_miss(question: str, prediction: str | None) -> str:
    """Why a wrong programming answer is wrong (one of :data:`CODE_MISS_KINDS`), its program read
    against the reference program of the question's problem."""
    block = extract_code_block(prediction or "")
    program = block if block is not None else (prediction or "").strip()
    shaped = _shape(program) if program.strip() else None
    if shaped is None or not shaped[0]:
        return "no program"
    try:
        problem = programming.parse_question(question)
    except ValueError:
        return "other"
    reference = _shape(programming.reference_solution(problem["spec"], problem["params"]))
    assert reference is not None, "a reference program tokenizes"
    if shaped[0] != reference[0]:
        other = _spec_shapes().get(shaped[0])
        return (
            "another problem's program" if other not in (None, problem["spec"]) else "program otherwise wrong"
        )
    words, numbers = shaped[1] != reference[1], shaped[2] != reference[2]
    if words and numbers:
        return "words and numbers miscopied"
    return "words miscopied" if words else "numbers miscopied" if numbers else "other"


def code_misses(rows: Iterable[dict[str, Any]], questions: dict[str, str]) -> dict[str, int]:
    """Counts of :data:`CODE_MISS_KINDS` over the wrong ``code`` rows of ``eval.v1`` (``questions``:
    task_id → question)."""
    kinds = Counter(
        classify_code_miss(questions.get(row["task_id"], ""), row["prediction"])
        for row in rows
        if row["family"] == "code" and not row["correct"]
    )
    return {k: kinds[k] for k in CODE_MISS_KINDS if kinds[k]}


def written_token_ids(tokenizer: Any, sft_rows: Iterable[dict[str, Any]]) -> set[int]:
    """The token ids SFT trains the student to write: its ``sft.v1`` rows' assistant text outside the
    observations (each piece encoded on its own)."""
    written: set[int] = set()
    for row in sft_rows:
        content, at = row["messages"][-1]["content"], 0
        for a, b in [*observation_spans(content), (len(content), len(content))]:
            written.update(tokenizer(content[at:a], add_special_tokens=False)["input_ids"])
            at = b
    return written


def start_copies(
    rows: Iterable[dict[str, Any]], questions: dict[str, str], tokenizer: Any, written: set[int]
) -> dict[str, dict[str, int]]:
    """Held-out multi-hop questions split by whether the start entity's name holds a token the student
    never wrote in training (``written``: :func:`written_token_ids`): how many, and how many of them
    were answered with the start entity miscopied into the first search."""
    out = {kind: {"questions": 0, "miscopied": 0} for kind in START_KINDS}
    for row in rows:
        question = questions.get(row["task_id"], "")
        if row["family"] != "mhqa" or not question:
            continue
        start = multihop.parse_question(question)["start"]
        ids = tokenizer(" " + start, add_special_tokens=False)["input_ids"]
        counts = out[START_KINDS[0] if any(i not in written for i in ids) else START_KINDS[1]]
        counts["questions"] += 1
        counts["miscopied"] += not row["correct"] and (
            classify_multihop_miss(question, row["text"] or "", row["prediction"]) == "start entity miscopied"
        )
    return out


def math_misses(rows: Iterable[dict[str, Any]], questions: dict[str, str]) -> dict[str, int]:
    """Counts of :data:`MISS_KINDS` over the wrong ``math`` rows of ``eval.v1`` (``questions``: task_id
    → question)."""
    kinds: Counter[str] = Counter()
    for row in rows:
        if row["family"] == "math" and not row["correct"]:
            question = questions.get(row["task_id"], "")
            kinds[classify_math_miss(question, row["text"] or "", row["prediction"])] += 1
    return {k: kinds[k] for k in MISS_KINDS if kinds[k]}


def seed_overrides(seed: int, fixed_data: bool) -> list[str]:
    """What a seed changes: the initialisation and the data order, and the tasks unless fixed."""
    out = [f"student.tiny.seed={seed}", f"sft.seed={seed}", "rl=null"]
    return out if fixed_data else [f"synthetic.seed={seed}", *out]


def run_seed(config: Path, overrides: Sequence[str], log: Any = print) -> dict[str, Any]:
    """Run the plan up to ``evaluate.after``; the evaluation's metrics and the SFT run's speed."""
    cfg = load_pipeline_config(config, list(overrides))
    done: dict[str, StepResult] = {}
    store = io.Store()
    for step in plan(cfg):
        if step.name in ("collect.heldout", "report", "evaluate.before"):
            continue
        start = time.perf_counter()
        done[step.name] = run_step(step, store, done)
        how = "reused" if done[step.name].reused else "built"
        log(f"  {step.name}: {how} in {time.perf_counter() - start:.0f} s")
        if step.name == LAST:
            break
    if LAST not in done:
        raise SystemExit(f"the plan of {config} has no {LAST} step (it needs sft and evaluate sections)")
    sft = json.loads(io.read_file(done["sft"].ref, "sft_result.json"))
    metrics = done[LAST].summary["metrics"]
    questions = {
        t["task_id"]: t["question"] for t in io.read_table(done["synthetic"].ref, "heldout").to_pylist()
    }
    rows = io.read_table(done[LAST].ref, "eval").to_pylist()
    return {
        "metrics": {
            f: {"accuracy": m["accuracy"], "format_valid": m["format_valid"], "n": m["n"]}
            for f, m in metrics.items()
        },
        "sft_steps": sft["global_step"],
        "sft_steps_per_min": 60 * sft["steps_run"] / sft["train_runtime_s"]
        if sft["train_runtime_s"]
        else math.nan,
        "sft_train_s": sft["train_runtime_s"],
        "math_misses": math_misses(rows, questions),
        "multihop_misses": multihop_misses(rows, questions),
        "code_misses": code_misses(rows, questions),
        "start_copies": _start_copies(done, rows, questions),
        "evaluation": done[LAST].ref.uri,
    }


def _start_copies(
    done: dict[str, StepResult], rows: list[dict[str, Any]], questions: dict[str, str]
) -> dict[str, dict[str, int]]:
    """:func:`start_copies` with the SFT model's tokenizer and the SFT data it was trained on."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(Path(done["sft"].ref.uri) / "model")
    written = written_token_ids(tokenizer, io.read_table(done["convert"].ref, "sft").to_pylist())
    return start_copies(rows, questions, tokenizer, written)


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def table(runs: dict[int, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The per-family table (a row per family and metric) and its summary as JSON."""
    seeds = sorted(runs)
    families = sorted({f for r in runs.values() for f in r["metrics"]}, key=lambda f: (f == "all", f))
    header = ["family", "metric", *[f"seed {s}" for s in seeds], "mean", "sd", "min", "max"]
    lines, summary = [header], {}
    for family in families:
        for metric in ("accuracy", "format_valid"):
            values = [runs[s]["metrics"].get(family, {}).get(metric) for s in seeds]
            known = [v for v in values if v is not None]
            if not known:
                continue
            stats = spread(known)
            summary[f"{family}.{metric}"] = {"per_seed": dict(zip(seeds, values, strict=True)), **stats}
            lines.append(
                [family, metric, *["-" if v is None else f"{v:.0%}" for v in values]]
                + [f"{stats['mean']:.0%}", f"{stats['sd']:.1%}", f"{stats['min']:.0%}", f"{stats['max']:.0%}"]
            )
    speed = [runs[s]["sft_steps_per_min"] for s in seeds]
    lines.append(
        ["sft", "steps/min", *[f"{v:,.0f}" for v in speed], f"{statistics.fmean(speed):,.0f}", "", "", ""]
    )
    widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in lines)
    return (
        text
        + "\n\nheld-out math misses by kind\n"
        + by_kind(runs, "math_misses")
        + "\n\nheld-out multi-hop misses by kind\n"
        + by_kind(runs, "multihop_misses")
        + "\n\nheld-out programming misses by kind\n"
        + by_kind(runs, "code_misses")
        + "\n\nheld-out multi-hop start entities miscopied, by whether SFT ever wrote the name's tokens\n"
        + "\n".join(
            f"seed {s}: "
            + ", ".join(
                f"{k} {c['miscopied']} of {c['questions']}"
                for k, c in runs[s].get("start_copies", {}).items()
            )
            for s in sorted(runs)
        )
    ), summary


def by_kind(runs: dict[int, dict[str, Any]], key: str) -> str:
    """A line per seed: the counts of its misses by kind (``runs[seed][key]``), or "none"."""
    return "\n".join(
        f"seed {s}: " + (", ".join(f"{k} {n}" for k, n in runs[s].get(key, {}).items()) or "none")
        for s in sorted(runs)
    )


DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides of the profile")
    parser.add_argument(
        "--config", type=Path, default=Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument(
        "--fixed-data", action="store_true", help="keep synthetic.seed: vary init and order only"
    )


def run(args: argparse.Namespace, bench: Bench) -> None:
    """``--quick``: tiny sizes, a smoke run (its numbers mean nothing)."""
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    base = [*(QUICK if args.quick else []), *args.overrides]
    runs = {}
    for seed in seeds:
        print(f"seed {seed}:", flush=True)
        start = time.perf_counter()
        runs[seed] = run_seed(args.config, [*base, *seed_overrides(seed, args.fixed_data)])
        bench.add_timing(f"seed {seed} (its plan up to evaluate.after)", [time.perf_counter() - start])
    text, summary = table(runs)
    what = "init + data order" if args.fixed_data else "tasks + init + data order"
    print(
        f"\nheld-out after SFT, {args.config} {' '.join(base)}; seeds vary {what}"
        + (" (--quick)" if args.quick else "")
    )
    print(text)
    bench.figure("seeds", seeds)
    bench.figure("runs", runs)
    bench.figure("spread", summary)


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
