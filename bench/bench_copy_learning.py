"""How fast the demo's student learns the copies its math answers need: tied against untied embeddings.

A held-out arithmetic answer is right only when the student copies three things: the question's
operands (digits) and operators into the plan's ``Expression:`` line (the program computes what the
plan says), and the printed value into ``\\boxed{}``. On 2026-11-25 a bad seed of the demo was a
student that had not yet learned to copy the operators (``bench/bench_demo_seeds.py``'s miss kinds).
This bench measures *when* each copy is learned, on the SFT recipe's own trainer:

For each variant (``tied``: the demo student's input embedding shared with its LM head, the
baseline; ``untied``: its own LM head) and seed, a fresh student (:func:`coa.model.tiny.init_model`,
the profile's ``student.tiny`` with ``tie_word_embeddings`` and ``seed`` set) trains with
:func:`coa.train.sft_trainer.build_trainer` (the profile's ``sft`` settings; ``--steps`` steps) on the
profile's SFT examples minus ``--heldout`` math tasks. Every ``--every`` steps a probe measures the
teacher-forced next-token accuracy on those held-out tasks at four copies: the operators and the
operand digits restated in the plan, and the printed value's digits where the reflection quotes it
and in ``\\boxed{}``.

Reported: per variant and seed the first probed step at which each copy reaches ``--target``
(95%), ``>N`` when it did not within the run, and per copy the ratio of the mean such step of
``untied`` to ``tied`` (a run that did not get there counts as its length, so a ratio is an upper
bound when tied runs fall short). ``--plot`` draws the curves; ``--json`` writes them in the record. The data
come from the profile's plan up to ``convert`` in the store of ``COA_STORAGE_ROOT`` (reused when
built). Runs are sequential; set ``OMP_NUM_THREADS`` to the cores you give it (the float sums, and so
a run's outcome, follow the thread count).

    python bench/bench_copy_learning.py [--config configs/demo.yaml] [key=value ...] [--seeds 0,1,2] \\
        [--variants tied,untied] [--steps 4000] [--every 250] [--plot copy.png] [--json copy.json] [--quick]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from harness import Bench, main

from coa import io
from coa.plan import load_pipeline_config, plan
from coa.steps import StepResult, run_step
from coa.train.data import select_examples

COPIES = ("operators", "operand digits", "printed value, reflection", "printed value, answer")
REGIONS = {
    "expression": re.compile(r"Expression: ([^\n]*)"),
    "printed value, reflection": re.compile(r"printed '(-?\d+)'"),
    "printed value, answer": re.compile(r"\\boxed\{(-?\d+)\}"),
}


def copy_positions(pieces: Sequence[str]) -> dict[str, list[int]]:
    """Token positions of each copy in one example, given its tokens' texts: the operators and the
    operand digits of the plan's ``Expression:`` line, the digits of the printed value where the
    reflection quotes it and in ``\\boxed{}``."""
    starts, text = [], ""
    for piece in pieces:
        starts.append(len(text))
        text += piece
    where: dict[str, list[int]] = {c: [] for c in COPIES}
    for region, pattern in REGIONS.items():
        match = pattern.search(text)
        if match is None:
            continue
        lo, hi = match.span(1)
        for k, (at, piece) in enumerate(zip(starts, pieces, strict=True)):
            token = piece.strip()
            if not lo <= at < hi or not token:
                continue
            if region != "expression":
                if token.isdigit():
                    where[region].append(k)
            elif token in ("+", "-", "*", "/"):
                where["operators"].append(k)
            elif token.isdigit():
                where["operand digits"].append(k)
    return where


VARIANTS = {"tied": True, "untied": False}
QUICK = [
    "synthetic.train={arithmetic: 40, multihop: 2, programming: 2}",
    "synthetic.heldout={arithmetic: 2, multihop: 1, programming: 1}",
    "curate.gate.correctness_floor=0.3",
    "student.tiny={vocab_size: 400, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 2, "
    "intermediate_size: 64}",
]


def demo_examples(config: Path, overrides: Sequence[str]) -> tuple[Any, pa.Table]:
    """The profile's config and its SFT examples (the plan up to ``convert``, reused from the store)."""
    cfg = load_pipeline_config(config, list(overrides))
    done: dict[str, StepResult] = {}
    store = io.Store()
    for step in plan(cfg):
        done[step.name] = run_step(step, store, done)
        print(f"  {step.name}: {'reused' if done[step.name].reused else 'built'}", flush=True)
        if step.name == "convert":
            break
    return cfg, select_examples(io.read_table(done["convert"].ref, "sft"), cfg.sft.families)


def split(examples: pa.Table, n_heldout: int) -> tuple[pa.Table, pa.Table]:
    """(train, probe): ``n_heldout`` math tasks, chosen by a hash of their id, kept out of training."""
    import hashlib

    math_tasks = sorted(
        {
            t
            for t, f in zip(examples["task_id"].to_pylist(), examples["family"].to_pylist(), strict=True)
            if f == "math"
        },
        key=lambda t: hashlib.sha256(t.encode()).hexdigest(),
    )
    held = pa.array(math_tasks[:n_heldout], pa.string())
    mask = pc.is_in(examples["task_id"], held)
    return examples.filter(pc.invert(mask)), examples.filter(mask)


class CopyProbe:
    """Teacher-forced accuracy at the copies of held-out math examples (positions found once, from
    the decoded text, so any tokenizer works)."""

    def __init__(self, tokenizer: Any, rows: pa.Table, max_length: int) -> None:
        from coa.train.data import encode_examples

        self.ids = encode_examples(rows, tokenizer, max_length).input_ids
        self.positions = [copy_positions([tokenizer.decode([i]) for i in ids]) for ids in self.ids]
        self.pad = tokenizer.pad_token_id

    def __call__(self, model: Any, batch_size: int = 32) -> dict[str, float]:
        import torch

        hits = dict.fromkeys(COPIES, 0)
        total = dict.fromkeys(COPIES, 0)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            for start in range(0, len(self.ids), batch_size):
                chunk = self.ids[start : start + batch_size]
                width = max(len(x) for x in chunk)
                ids = torch.tensor([x + [self.pad] * (width - len(x)) for x in chunk], device=model.device)
                mask = torch.tensor(
                    [[1] * len(x) + [0] * (width - len(x)) for x in chunk], device=model.device
                )
                pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
                for b, x in enumerate(chunk):
                    for copy, places in self.positions[start + b].items():
                        for q in places:
                            hits[copy] += int(pred[b, q - 1]) == x[q]
                            total[copy] += 1
        model.train(was_training)
        return {c: hits[c] / total[c] for c in COPIES if total[c]}


def train_variant(
    cfg: Any, train: pa.Table, probe_rows: pa.Table, tied: bool, seed: int, steps: int, every: int
) -> dict[str, Any]:
    """One fresh student trained ``steps`` steps; its probe curve and SFT speed."""
    from transformers import AutoTokenizer, TrainerCallback

    from coa.model.tiny import init_model, sft_corpus
    from coa.train.config import SFTRunConfig, SFTStageConfig
    from coa.train.sft_trainer import build_trainer

    with tempfile.TemporaryDirectory(prefix="copy-") as tmp:
        tiny = cfg.student.tiny.model_copy(update={"tie_word_embeddings": tied, "seed": seed})
        model_dir = init_model(sft_corpus(train), tiny, Path(tmp) / "student")
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        probe = CopyProbe(tokenizer, probe_rows, cfg.sft.max_length)
        params = cfg.sft.model_dump(include=set(SFTStageConfig.model_fields))
        params.update(max_steps=steps, time_budget_s=None, seed=seed, save_steps=steps, heldout_fraction=0.0)
        run = SFTRunConfig(**params, base_model=str(model_dir), output_dir=str(Path(tmp) / "out"))
        curve: list[dict[str, float]] = []

        class Probe(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
                if state.global_step % every == 0 or state.global_step == state.max_steps:
                    curve.append({"step": state.global_step, **probe(model)})
                    print(
                        f"    step {state.global_step}: "
                        + ", ".join(f"{c} {v:.0%}" for c, v in curve[-1].items() if c != "step"),
                        flush=True,
                    )

        built = build_trainer(train, run, Path(tmp) / "out", callbacks=[Probe()])
        start = time.perf_counter()
        built.trainer.train()
        seconds = time.perf_counter() - start
    return {"curve": curve, "steps_per_min": 60 * steps / seconds, "train_s": seconds}


def learned_at(curve: Sequence[dict[str, float]], copy: str, target: float) -> int | None:
    """The first probed step at which ``copy`` reached ``target`` (None: not within the run)."""
    return next((int(p["step"]) for p in curve if p.get(copy, 0.0) >= target), None)


def report(runs: dict[str, dict[int, dict[str, Any]]], steps: int, target: float) -> str:
    lines = [f"steps until a copy is {target:.0%} right (teacher-forced, held-out math), per seed"]
    means: dict[str, dict[str, float]] = {}
    for variant, by_seed in runs.items():
        for copy in COPIES:
            at = [learned_at(r["curve"], copy, target) for r in by_seed.values()]
            means.setdefault(copy, {})[variant] = statistics.fmean(steps if a is None else a for a in at)
            shown = ", ".join(
                f"seed {s}: {'>' + str(steps) if a is None else a}" for s, a in zip(by_seed, at, strict=True)
            )
            lines.append(f"  {variant:7s} {copy:26s} {shown}")
        speed = statistics.fmean(r["steps_per_min"] for r in by_seed.values())
        lines.append(f"  {variant:7s} SFT steps/min {speed:,.0f}")
    if {"tied", "untied"} <= set(runs):
        lines.append("ratio of mean steps to learn, untied / tied (< 1: untied learns sooner)")
        lines += [f"  {c:26s} {means[c]['untied'] / means[c]['tied']:.2f}" for c in COPIES]
    return "\n".join(lines)


def plot(runs: dict[str, dict[int, dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(COPIES), figsize=(4.2 * len(COPIES), 3.6), sharey=True)
    for ax, copy in zip(axes, COPIES, strict=True):
        for variant, by_seed in runs.items():
            for seed, r in by_seed.items():
                xs = [p["step"] for p in r["curve"]]
                ax.plot(
                    xs,
                    [p.get(copy, float("nan")) for p in r["curve"]],
                    color="tab:blue" if variant == "tied" else "tab:orange",
                    alpha=0.8,
                    label=f"{variant} seed {seed}",
                )
        ax.set_title(copy)
        ax.set_xlabel("SFT step")
    axes[0].set_ylabel("teacher-forced accuracy")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides of the profile")
    parser.add_argument(
        "--config", type=Path, default=Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    )
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--variants", default="tied,untied")
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--heldout", type=int, default=300, help="math tasks kept out for the probe")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--plot", type=Path)


def run(args: argparse.Namespace, bench: Bench) -> None:
    """``--quick``: tiny sizes, a smoke run (its numbers mean nothing)."""
    if args.quick:
        args.steps, args.every, args.heldout = 4, 2, 4
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variant(s) {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    cfg, examples = demo_examples(args.config, [*(QUICK if args.quick else []), *args.overrides])
    train, probe_rows = split(examples, args.heldout)
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for variant in variants:
        for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
            print(f"{variant}, seed {seed}:", flush=True)
            runs.setdefault(variant, {})[seed] = train_variant(
                cfg, train, probe_rows, VARIANTS[variant], seed, args.steps, args.every
            )
    print(report(runs, args.steps, args.target))
    if args.plot is not None:
        plot(runs, args.plot)
    bench.figure("steps", args.steps)
    bench.figure("runs", runs)
    for variant, by_seed in runs.items():
        bench.add_timing(f"{variant} training", [r["train_s"] for r in by_seed.values()])
    if {"tied", "untied"} <= set(runs):  # the baseline: the tied student
        for copy in COPIES:
            mean = {
                v: statistics.fmean(
                    args.steps if (a := learned_at(r["curve"], copy, args.target)) is None else a
                    for r in runs[v].values()
                )
                for v in ("tied", "untied")
            }
            bench.ratio(f"untied / tied steps to learn {copy}", mean["untied"], mean["tied"])


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
