"""RL or a self-improvement round beside continued SFT for the same time, on fresh held-out tasks.

Given a store holding a finished pipeline run (the demo by default), this answers issue 15's
question: did the RL phase beat simply training the SFT model longer on the same family's data?
``--candidate sft.r2`` asks it of the second round instead (``rounds: 2``: the round-1 model's
verified-correct samples curated beside the teacher's runs, then SFT from the round-1 model): its
cost is the sampling, curation and conversion steps' wall time plus the round's training time, and
its family the one the round sampled (``sampling.families``).

1. **The run's artifacts.** The config (``configs/demo.yaml`` + overrides) gives the plan
   (:func:`coa.plan.pipeline.plan`); its committed ``synthetic``, ``convert``, ``sft`` and ``rl``
   artifacts are found by content key exactly as ``coa run --dry-run`` does
   (:func:`coa.plan.preview.preview`). Nothing is rebuilt: a missing or failed step is a user error. The
   keys hash the code (``coa/``, ``schemas/``): run the bench from the checkout that made the run, or
   name the RL artifact (``--rl URI``) and the rest is found through its lineage. The stage settings
   used below (synthetic seed, SFT, RL) are the ones recorded in the artifacts' lineage.
2. **Held-out tasks** (``--heldout N``, default 200) of the RL family (``rl.families``, e.g. ``code``
   = the ``programming`` generator): ``generate(family, N, synthetic.seed, "heldout")``. A problem's
   split is a hash of its *structure* (spec and parameters), never the seed
   (:func:`coa.synthetic.split_of`), so no seed or count can draw a training problem into
   ``heldout``; the tasks are also checked against the run's own ``train`` table
   (:func:`coa.synthetic.assert_disjoint`). The generator draws problems in order, so the run's own
   held-out tasks of the family are the first ones of the N (the same questions and task ids): the
   SFT model's scores there are compared with the committed ``evaluate.after`` as a check. (The
   programming generator has 258 distinct held-out problems.)
3. **Continued SFT** from the SFT model with :func:`coa.train.sft.run_sft` (what the ``sft`` step
   calls), the SFT stage's settings but ``time_budget_s`` = the RL run's measured training time
   (``rl_result.json`` ``train_runtime_s``: generation, tools and optimizer steps; both runs count
   their training loop only, setup and SFT's step-time calibration are outside), a constant learning
   rate at the SFT run's final one (peak x ``min_lr_ratio`` for cosine: 2e-4 in the demo; the RL
   run's is 1e-4) after the SFT stage's warm-up, no intermediate checkpoints (never resumed), into a
   temporary folder (``--work-dir`` keeps it). Its data: the ``sft`` examples of
   the **RL family only** (``--sft-families`` to change). That is the fairer comparison: RL spends
   its whole budget on that family's training tasks, so continued SFT gets the same tasks' teacher
   trajectories for the same time; the SFT stage's mix (math + code in the demo) would spend part of
   the time on another family and handicap the baseline on this one.
4. **Evaluation** of the SFT, RL and continued-SFT models on the same N tasks with
   :func:`coa.evaluate.stage.evaluate_tasks` (what the ``evaluate`` step calls), the run's evaluate
   settings, greedy (one sample). The table: accuracy, format-valid share, completion tokens per
   task, the paired difference against the SFT model with its 95% paired-bootstrap interval
   (:func:`coa.evaluate.compare.compare`), training time, steps, and how far each model's weights
   moved from the SFT model's (relative L2). ``--json`` writes it in the run's record.

5. **Where the points come from**: the same tasks by kind (the generator's spec or template, e.g.
   ``fizzbuzz``), each model's correct count per kind (:func:`by_kind`), and for a round the correct
   share of its own samples of that kind (what the round could train on beside the teacher's runs):
   which kinds a gain or a loss comes from, and whether the round's samples had solved them.

6. **The families it did not target** (``--also mhqa,math``): the three models on ``N`` held-out
   tasks of each, the same paired differences against the SFT model. A round or an RL phase on one
   family can unlearn another (the demo's round at SFT's peak learning rate cost multi-hop 8.5
   points under seed 0); continued SFT on one family's examples alone usually costs the others more.

``--quick`` is a smoke run: 8 tasks unless ``--heldout`` says otherwise, the continued SFT capped at
10 s with a 5-step calibration. The full run on the demo store takes about the RL budget plus three
evaluations of N tasks (a few CPU minutes).

    python bench/bench_rl_vs_sft.py [--config configs/demo.yaml] [key=value ...] [--rl URI] \\
        [--heldout 200] [--sft-families code] [--also mhqa,math] [--lr 2e-4] [--json rl_vs_sft.json] \\
        [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from harness import Bench, main

from coa import io
from coa.errors import CheckFailed, UserError
from coa.plan import PipelineConfig, load_pipeline_config, plan
from coa.plan.choices import eval_tools
from coa.plan.preview import preview
from coa.rl.config import RLStageConfig
from coa.sample.config import SampleConfig
from coa.steps import ModelInput
from coa.synthetic import SyntheticConfig
from coa.train.config import SFTStageConfig

NEEDED = ("synthetic", "convert", "sft", "rl")
CANDIDATES = ("rl", "sft.r2")
ROUND_STEPS = ("sample.r1", "curate.r2", "convert.r2")
"""The steps between the round-1 model and ``sft.r2``, whose wall time the round's cost counts."""
CHECK_STEP = "evaluate.after"
QUICK_HELDOUT = 8
QUICK_BUDGET_S = 10.0
QUICK_CALIBRATION = 5
CONFIDENCE = 0.95
NO_CHECKPOINTS = 10**9


@dataclasses.dataclass(frozen=True)
class Located:
    """The run's committed artifacts (``evaluate.after`` only when found) and the stage configs they
    were built with (read from their lineage; the profile's section when it no longer parses)."""

    refs: dict[str, io.ArtifactRef]
    synthetic: SyntheticConfig
    sft: SFTStageConfig
    rl: RLStageConfig | None
    candidate: str = "rl"
    """The step compared with continued SFT: ``rl``, or ``sft.r2`` (the second round's model)."""
    sampling: SampleConfig | None = None
    """The round's sampling settings (``sft.r2`` only)."""

    def __getitem__(self, name: str) -> io.ArtifactRef:
        return self.refs[name]


def needed(candidate: str) -> tuple[str, ...]:
    """The committed steps the comparison of ``candidate`` reads."""
    if candidate == "rl":
        return NEEDED
    return (*NEEDED[:-1], *ROUND_STEPS, candidate)


def locate(
    config: PipelineConfig, store: io.Store, rl_uri: str | None = None, candidate: str = "rl"
) -> Located:
    """The run's committed ``synthetic``, ``convert``, ``sft`` and candidate (``rl`` or ``sft.r2``, with
    the round's sampling, curation and conversion) artifacts.

    By the plan's content keys, as ``coa run --dry-run`` finds them (the keys hash the code version:
    run from the checkout that made the run); or, with ``rl_uri``, by that RL artifact's lineage (its
    base model and prompts, the prompts' task set), whatever code made it.
    """
    if candidate not in CANDIDATES:
        raise UserError(f"--candidate {candidate!r}: one of {', '.join(CANDIDATES)}")
    if config.synthetic is None or config.sft is None or config.evaluate is None:
        raise UserError("the config needs `synthetic`, `sft` and `evaluate` sections (configs/demo.yaml)")
    if candidate == "rl" and config.rl is None:
        raise UserError("the config has no `rl` section: compare a round with --candidate sft.r2")
    if candidate != "rl" and (config.rounds < 2 or rl_uri is not None):
        raise UserError(f"--candidate {candidate} needs a run with `rounds: 2` or more (and no --rl)")
    refs = _by_lineage(rl_uri, store) if rl_uri is not None else _by_plan(config, store, needed(candidate))
    base = io.read_lineage(refs[candidate]).get("inputs", {}).get("base", {}).get("uri")
    if base != refs["sft"].uri:
        raise UserError(
            f"the {candidate} model started from {base}, not from the SFT model {refs['sft'].uri}"
        )
    rl = _recorded(refs["rl"], RLStageConfig, config.rl) if candidate == "rl" else None
    sampling = None if candidate == "rl" else _recorded(refs["sample.r1"], SampleConfig, config.sampling)
    return Located(
        refs,
        _recorded(refs["synthetic"], SyntheticConfig, config.synthetic),
        _recorded(refs["sft"], SFTStageConfig, config.sft),
        rl,
        candidate,
        sampling,
    )


def _by_plan(config: PipelineConfig, store: io.Store, names: Sequence[str]) -> dict[str, io.ArtifactRef]:
    planned = {p.name: p for p in preview(plan(config), store)}
    refs: dict[str, io.ArtifactRef] = {}
    for name in (*names, CHECK_STEP):
        p = planned.get(name)
        ref = io.lookup(p.uri, store.settings) if p is not None and p.uri else None
        failed = p is not None and "check failed" in p.status
        if name in names and (ref is None or failed):
            why = p.status if p is not None else "not in the plan"
            raise UserError(
                f"step {name!r} has no usable committed artifact in {store.root} ({why}): run the pipeline "
                "first (`make demo`, or `coa run` with the same config and overrides), from this checkout "
                "(the keys hash the code), or name the RL artifact with --rl"
            )
        if ref is not None and not failed:
            refs[name] = ref
    return refs


def _by_lineage(rl_uri: str, store: io.Store) -> dict[str, io.ArtifactRef]:
    rl = io.open_artifact(rl_uri, store.settings)
    lineage = io.read_lineage(rl)
    inputs = lineage.get("inputs", {})
    if lineage.get("step", "").split(".")[0] != "rl" or "prompts" not in inputs:
        raise UserError(f"{rl_uri} is not an RL artifact (its lineage names no prompts)")
    convert = io.open_artifact(inputs["prompts"]["uri"], store.settings)
    tasks = io.read_lineage(convert).get("inputs", {}).get("tasks", {}).get("uri")
    if tasks is None:
        raise UserError(f"the RL prompts {convert.uri} name no task set in their lineage")
    return {
        "rl": rl,
        "sft": io.open_artifact(inputs["base"]["uri"], store.settings),
        "convert": convert,
        "synthetic": io.open_artifact(tasks, store.settings),
    }


def _recorded(ref: io.ArtifactRef, model: type[Any], fallback: Any) -> Any:
    """The stage config recorded in the artifact's lineage (``fallback`` when it no longer parses)."""
    from pydantic import ValidationError

    recorded = io.read_lineage(ref).get("config", {}).get("config")
    try:
        return model.model_validate(recorded) if recorded is not None else fallback
    except ValidationError:
        return fallback


def candidate_family(located: Located, family: str | None) -> str:
    """The task family to compare on: ``family``, else the one family the candidate trained on: RL's
    (the lineage's ``families``: the pick of ``rl.families: auto``, else the configured ones), or the
    one the round sampled (``sampling.families``)."""
    if family is not None:
        return family
    if located.candidate == "rl":
        assert located.rl is not None
        families = io.read_lineage(located["rl"]).get("families") or located.rl.families
        key = "rl.families"
    else:
        assert located.sampling is not None
        families, key = located.sampling.families, "sampling.families"
    if not families or len(families) != 1:
        raise UserError(f"{key} is {families}: name the family to compare on with --family")
    return families[0]


def candidate_cost(located: Located) -> dict[str, float]:
    """What the candidate cost, in seconds: RL's training time (generation, tools and optimizer
    steps); a round's sampling, curation and conversion steps (their builds' wall time) and its
    training time. ``total`` is continued SFT's budget."""
    from coa.resources import BuildResources
    from coa.rl.step import read_result as read_rl_result
    from coa.train.step import read_result as read_sft_result

    if located.candidate == "rl":
        train = read_rl_result(located["rl"]).train_runtime_s
        return {"rl": train, "total": train}
    cost: dict[str, float] = {}
    for name in ROUND_STEPS:
        used = BuildResources.from_json(io.read_lineage(located[name]).get("resources"))
        if used is None:
            raise UserError(f"{located[name].uri} records no build time: rebuild it with this checkout")
        cost[name] = used.wall_s
    cost[located.candidate] = read_sft_result(located[located.candidate]).train_runtime_s
    cost["total"] = sum(cost.values())
    return cost


def heldout_tasks(located: Located, family: str, n: int) -> pa.Table:
    """``n`` held-out tasks of ``family`` (a ``task.v1`` family such as ``code``), none in training."""
    from coa.synthetic import TASK_FAMILY, assert_disjoint, generate

    synthetic = located.synthetic
    generators = [name for name, fam in TASK_FAMILY.items() if fam == family]
    if not generators:
        raise UserError(
            f"no synthetic generator makes {family!r} tasks (they make {sorted(TASK_FAMILY.values())})"
        )
    tasks = generate(
        generators[0],
        n,
        synthetic.seed,
        "heldout",
        encyclopedia_seed=synthetic.encyclopedia_seed,
        encyclopedia_size=synthetic.encyclopedia_size,
        arithmetic_templates=synthetic.arithmetic_templates,
    )
    try:
        assert_disjoint(io.read_table(located["synthetic"], "train"), tasks)
    except AssertionError as e:
        raise CheckFailed(f"held-out tasks overlap the run's training tasks: {e}") from e
    return tasks


def final_learning_rate(sft: SFTStageConfig) -> float:
    """Where the SFT run's schedule ended: peak x ``min_lr_ratio`` for cosine (a tenth of the peak when
    the schedule decays to 0), the peak for constant schedules."""
    if sft.lr_scheduler.startswith("constant"):
        return float(sft.learning_rate)
    ratio = sft.min_lr_ratio if sft.lr_scheduler == "cosine" and sft.min_lr_ratio > 0 else 0.1
    return float(sft.learning_rate * ratio)


def continued_sft(
    located: Located,
    families: Sequence[str],
    budget_s: float,
    learning_rate: float,
    out: Path,
    calibration_steps: int | None = None,
) -> Any:
    """Train the SFT model on for ``budget_s`` seconds on the ``families`` examples; its SFTResult."""
    from coa.train.config import SFTRunConfig, SFTStageConfig
    from coa.train.data import select_examples
    from coa.train.sft import run_sft

    params = located.sft.model_dump(include=set(SFTStageConfig.model_fields))
    params.update(
        max_steps=None,
        time_budget_s=budget_s,
        learning_rate=learning_rate,
        lr_scheduler="constant_with_warmup",
        min_lr_ratio=0.0,
        save_steps=NO_CHECKPOINTS,  # a throwaway run is never resumed: its only save is the final model
    )
    if calibration_steps is not None:
        params["calibration_steps"] = min(params["calibration_steps"], calibration_steps)
    base = ModelInput(ref=located["sft"]).local_path()
    run_config = SFTRunConfig(**params, base_model=base, output_dir=str(out))
    examples = select_examples(io.read_table(located["convert"], "sft"), list(families))
    return run_sft(examples, run_config, out)


def weight_change(model_dir: str | Path, reference_dir: str | Path) -> float:
    """``||w - w_ref|| / ||w_ref||`` over the tensors both safetensors checkpoints hold."""
    from safetensors.torch import load_file

    def tensors(folder: str | Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in sorted(Path(folder).glob("*.safetensors")):
            out.update(load_file(str(f)))
        if not out:
            raise UserError(f"no *.safetensors weights in {folder}")
        return out

    a, b = tensors(model_dir), tensors(reference_dir)
    diff = ref = 0.0
    for key in sorted(a.keys() & b.keys()):
        x, y = a[key].double(), b[key].double()
        diff += float((x - y).pow(2).sum())
        ref += float(y.pow(2).sum())
    return math.sqrt(diff / ref) if ref else float("nan")


def evaluate(
    config: PipelineConfig, model_dir: str, tasks: pa.Table, store: io.Store, pages: Any = None
) -> pa.Table:
    """The run's evaluation of one model on ``tasks``, greedy, its local search serving ``pages`` (the
    run's encyclopedia): an ``eval.v1`` table."""
    from coa.evaluate.stage import evaluate_tasks, open_generator
    from coa.tools.build import build_toolbox

    assert config.evaluate is not None
    eval_config = config.evaluate.model_copy(
        update={"samples": 1, "families": None, "limit_per_family": None, "limit_per_benchmark": None}
    )
    root = store.root if "://" not in store.root else None
    toolbox = build_toolbox(eval_tools(config), root, eval_config.leak_guard.blocked_hosts, pages)
    policy = open_generator(eval_config, model_dir)
    try:
        return evaluate_tasks(tasks, policy, toolbox, eval_config)
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            close()


def model_row(name: str, table: pa.Table, baseline: pa.Table | None, **extra: Any) -> dict[str, Any]:
    """One line of the table: the model's metrics and its paired difference with ``baseline``."""
    from coa.evaluate.compare import ALL, compare
    from coa.evaluate.metrics import eval_metrics

    m = eval_metrics(table)["all"]
    row: dict[str, Any] = {
        "model": name,
        "n": m["n"],
        "accuracy": m["accuracy"],
        "format_valid": m["format_valid"],
        "tokens_per_task": m["tokens_per_task"],
    }
    if baseline is not None:
        for metric, key in (("correct", "accuracy"), ("format_valid", "format_valid")):
            d = compare(table, baseline, metric=metric, confidence=CONFIDENCE)[ALL]
            row[f"delta_{key}"] = {"delta": d.delta, "low": d.low, "high": d.high, "pairs": d.pairs}
    return row | extra


def task_kind(metadata: str | None) -> str:
    """A synthetic task's kind from its ``metadata``: the spec or template that generated it."""
    try:
        meta = json.loads(metadata or "{}")
    except ValueError:
        return "?"
    structure = meta.get("structure") or {}
    return str(structure.get("spec") or structure.get("template") or meta.get("template") or "?")


def by_kind(
    tasks: pa.Table, evals: dict[str, pa.Table], samples: pa.Table | None = None
) -> list[dict[str, Any]]:
    """Per task kind (most tasks first): the held-out tasks, each model's correct count on them and,
    given the round's samples (``rollout.v1`` with each task's ``metadata``), how many of that kind's
    samples were correct, of how many."""
    held = tasks.select(["task_id", "metadata"]).to_pylist()
    kinds = {r["task_id"]: task_kind(r["metadata"]) for r in held}
    rows: dict[str, dict[str, Any]] = {}

    def row(kind: str) -> dict[str, Any]:
        return rows.setdefault(kind, {"kind": kind, "tasks": 0, "correct": dict.fromkeys(evals, 0)})

    for kind in kinds.values():
        row(kind)["tasks"] += 1
    for name, table in evals.items():
        for r in table.select(["task_id", "correct"]).to_pylist():
            if r["task_id"] in kinds:
                row(kinds[r["task_id"]])["correct"][name] += bool(r["correct"])
    for r in samples.to_pylist() if samples is not None else []:
        got = row(task_kind(r["metadata"])).setdefault("samples", {"correct": 0, "n": 0})
        got["correct"] += bool(r["correct"])
        got["n"] += 1
    return sorted(rows.values(), key=lambda r: (-r["tasks"], r["kind"]))


def round_samples(located: Located) -> pa.Table | None:
    """The round's samples (``sample.r1``) with each task's metadata; None when the candidate is RL."""
    ref = located.refs.get("sample.r1")
    if located.candidate != "sft.r2" or ref is None:
        return None
    samples = io.read_table(ref, "rollouts", columns=["task_id", "correct"])
    train = io.read_table(located["synthetic"], "train", columns=["task_id", "metadata"])
    meta = dict(zip(train.column("task_id").to_pylist(), train.column("metadata").to_pylist(), strict=True))
    ids = samples.column("task_id").to_pylist()
    return samples.append_column("metadata", pa.array([meta.get(t) for t in ids], pa.string()))


def agreement_check(
    located: Located, tasks: pa.Table, sft_eval: pa.Table, family: str
) -> dict[str, Any] | None:
    """The SFT model here vs the committed ``evaluate.after`` on the tasks both ran (same task id and
    question); None without a committed ``evaluate.after`` or a shared task."""
    ref = located.refs.get(CHECK_STEP)
    if ref is None:
        return None
    committed = io.read_table(located["synthetic"], "heldout").select(["task_id", "question"]).to_pylist()
    ours = {r["task_id"]: r["question"] for r in tasks.select(["task_id", "question"]).to_pylist()}
    same = {r["task_id"] for r in committed if ours.get(r["task_id"]) == r["question"]}
    runs = io.read_table(ref, "eval", columns=["task_id", "family", "sample_index", "correct"])
    stored = {
        r["task_id"]: bool(r["correct"])
        for r in runs.to_pylist()
        if r["family"] == family and r["sample_index"] == 0
    }
    here = {r["task_id"]: bool(r["correct"]) for r in sft_eval.select(["task_id", "correct"]).to_pylist()}
    shared = sorted(t for t in stored.keys() & here.keys() if t in same)
    if not shared:
        return None
    return {
        "tasks": len(shared),
        "agreement": sum(stored[t] == here[t] for t in shared) / len(shared),
        "accuracy_committed": sum(stored[t] for t in shared) / len(shared),
        "accuracy_here": sum(here[t] for t in shared) / len(shared),
    }


def run_bench(
    config: PipelineConfig,
    store: io.Store | None = None,
    heldout: int = 200,
    family: str | None = None,
    sft_families: Sequence[str] | None = None,
    learning_rate: float | None = None,
    quick: bool = False,
    work_dir: str | Path | None = None,
    rl_uri: str | None = None,
    candidate: str = "rl",
    also: Sequence[str] = (),
) -> dict[str, Any]:
    """The comparison (see the module docstring) as a JSON-ready document."""
    from coa.rl.step import read_result as read_rl_result
    from coa.tools.collection import Collection
    from coa.train.step import read_result as read_sft_result

    store = store or io.Store()
    located = locate(config, store, rl_uri, candidate)
    fam = candidate_family(located, family)
    tasks = heldout_tasks(located, fam, heldout)
    others = {f: heldout_tasks(located, f, heldout) for f in also if f != fam}
    cost = candidate_cost(located)
    sft_result = read_sft_result(located["sft"])
    budget = cost["total"] if not quick else min(cost["total"], QUICK_BUDGET_S)
    lr = learning_rate if learning_rate is not None else final_learning_rate(located.sft)
    families = list(sft_families) if sft_families else [fam]
    sft_dir = ModelInput(ref=located["sft"]).local_path()
    cand_dir = ModelInput(ref=located[candidate]).local_path()
    if candidate == "rl":
        assert located.rl is not None
        rl_result = read_rl_result(located["rl"])
        cand = {"steps": rl_result.global_step, "learning_rate": located.rl.learning_rate,
                "resumed_from_step": rl_result.start_step}  # fmt: skip
    else:
        round_result = read_sft_result(located[candidate])
        cand = {"steps": round_result.global_step, "final_loss": round_result.final_loss,
                "examples": round_result.n_examples, "resumed_from_step": 0}  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="coa-bench-rlsft-") as tmp:
        out = Path(work_dir) if work_dir is not None else Path(tmp)
        t0 = time.perf_counter()
        cont = continued_sft(located, families, budget, lr, out / "continued_sft",
                             QUICK_CALIBRATION if quick else None)  # fmt: skip
        cont_wall = time.perf_counter() - t0
        evals = {}
        timings = {}
        models = {"sft": sft_dir, candidate: cand_dir, "continued_sft": cont.model_dir}
        pages = Collection.from_table(io.read_table(located["synthetic"], "encyclopedia"))  # the run's
        for name, model_dir in models.items():
            t0 = time.perf_counter()
            evals[name] = evaluate(config, model_dir, tasks, store, pages)
            timings[name] = round(time.perf_counter() - t0, 1)
        other_evals = {
            f: {
                name: evaluate(config, model_dir, f_tasks, store, pages) for name, model_dir in models.items()
            }
            for f, f_tasks in others.items()
        }
        cont_change = weight_change(cont.model_dir, sft_dir)
    rows = [
        model_row("sft", evals["sft"], None, train_s=sft_result.train_runtime_s, steps=sft_result.global_step,
                  weight_change=0.0, uri=located["sft"].uri),
        model_row(candidate, evals[candidate], evals["sft"], train_s=cost["total"], steps=cand["steps"],
                  weight_change=weight_change(cand_dir, sft_dir), uri=located[candidate].uri,
                  **{k: v for k, v in cand.items() if k not in ("steps", "resumed_from_step")}),
        model_row("continued_sft", evals["continued_sft"], evals["sft"], train_s=cont.train_runtime_s,
                  steps=cont.global_step, weight_change=cont_change, learning_rate=lr,
                  families=families, examples=cont.n_examples, final_loss=cont.final_loss),
    ]  # fmt: skip
    return {
        "candidate": candidate,
        "family": fam,
        "heldout": tasks.num_rows,
        "quick": quick,
        "time_budget_s": budget,
        "candidate_cost_s": cost,
        "rl_resumed_from_step": cand["resumed_from_step"],  # > 0: RL's time covers the resumed part only
        "continued_sft_wall_s": round(cont_wall, 1),
        "eval_wall_s": timings,
        "store": store.root,
        "models": rows,
        "artifacts": {name: ref.uri for name, ref in located.refs.items()},
        "also": {
            f: [model_row(name, table, None if name == "sft" else got["sft"]) for name, table in got.items()]
            for f, got in other_evals.items()
        },
        "check_vs_evaluate_after": agreement_check(located, tasks, evals["sft"], fam),
        "by_kind": by_kind(tasks, evals, round_samples(located)),
    }


def _delta(row: dict[str, Any], key: str) -> str:
    """A row's paired difference against the SFT model, in points with its interval."""
    d = row.get(f"delta_{key}")
    if d is None:
        return "(baseline)"
    return f"{100 * d['delta']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def format_table(result: dict[str, Any]) -> str:
    """The models as an aligned text table (rates in percent, differences in points)."""
    from coa.evaluate.metrics import aligned_table, cell

    header = ["model", "tasks", "accuracy", "Δacc. vs SFT [95%]", "valid", "Δvalid vs SFT [95%]",
              "tok/task", "train s", "steps", "Δw/|w|"]  # fmt: skip
    lines = [header]
    for r in result["models"]:
        lines.append(
            [r["model"], str(r["n"]), cell(r["accuracy"], "{:.1%}"), _delta(r, "accuracy"),
             cell(r["format_valid"], "{:.1%}"), _delta(r, "format_valid"),
             cell(r["tokens_per_task"], "{:,.0f}"), cell(r["train_s"], "{:,.0f}"), str(r["steps"]),
             cell(r["weight_change"], "{:.3f}")]
        )  # fmt: skip
    return aligned_table(lines)


def format_also(result: dict[str, Any]) -> str:
    """The three models on the other families' held-out tasks (``--also``), one line per family and model."""
    from coa.evaluate.metrics import aligned_table, cell

    lines = [["family", "model", "tasks", "accuracy", "Δacc. vs SFT [95%]", "valid", "Δvalid vs SFT [95%]"]]
    for family, rows in result["also"].items():
        for r in rows:
            lines.append(
                [family, r["model"], str(r["n"]), cell(r["accuracy"], "{:.1%}"), _delta(r, "accuracy"),
                 cell(r["format_valid"], "{:.1%}"), _delta(r, "format_valid")]
            )  # fmt: skip
    return aligned_table(lines)


def format_kinds(result: dict[str, Any]) -> str:
    """``by_kind`` as an aligned table: correct / tasks per model, and the round's samples' share."""
    from coa.evaluate.metrics import aligned_table

    names = [r["model"] for r in result["models"]]
    with_samples = any("samples" in row for row in result["by_kind"])
    lines = [["kind", "tasks", *names, *(["round's samples correct"] if with_samples else [])]]
    for row in result["by_kind"]:
        got = row.get("samples")
        lines.append(
            [row["kind"], str(row["tasks"]), *(str(row["correct"].get(n, 0)) for n in names),
             *([f"{got['correct']}/{got['n']}" if got else "-"] if with_samples else [])]
        )  # fmt: skip
    return aligned_table(lines)


DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides the run was made with")
    parser.add_argument("--config", "-c", default=str(DEMO), help="YAML profile of the run")
    parser.add_argument("--heldout", type=int, default=None, help="held-out tasks (default 200; quick: 8)")
    parser.add_argument("--family", default=None, help="task family to compare on (default: rl.families)")
    parser.add_argument(
        "--sft-families",
        default=None,
        help="comma-separated families continued SFT trains on (default: --family)",
    )
    parser.add_argument(
        "--also",
        default="",
        help="comma-separated other families to evaluate the three models on (what the candidate costs them)",
    )
    parser.add_argument("--lr", type=float, default=None, help="continued SFT's learning rate")
    parser.add_argument("--rl", default=None, help="the RL artifact URI (else found by the plan's keys)")
    parser.add_argument(
        "--candidate", default="rl", choices=CANDIDATES, help="compare RL (default) or round 2's model"
    )
    parser.add_argument("--work-dir", default=None, help="keep the continued-SFT model here (default: temp)")


def run(args: argparse.Namespace, bench: Bench) -> None:
    """``--quick``: a smoke run, few tasks, <= 10 s of training."""
    config = load_pipeline_config(args.config, args.overrides)
    heldout = args.heldout if args.heldout is not None else (QUICK_HELDOUT if args.quick else 200)
    result = run_bench(
        config,
        heldout=heldout,
        family=args.family,
        sft_families=args.sft_families.split(",") if args.sft_families else None,
        learning_rate=args.lr,
        quick=args.quick,
        work_dir=args.work_dir,
        rl_uri=args.rl,
        candidate=args.candidate,
        also=[f for f in args.also.split(",") if f],
    )
    spent = "the RL run's training time" if args.candidate == "rl" else "the round's sampling and training"
    print(f"\n{result['family']}: {result['heldout']} held-out tasks, continued SFT for "
          f"{result['time_budget_s']:.0f} s ({spent})")  # fmt: skip
    print(format_table(result))
    if result["also"]:
        print(f"\nthe other families, {result['heldout']} held-out tasks each:")
        print(format_also(result))
    print("\nby task kind (correct of the held-out tasks):")
    print(format_kinds(result))
    if result["rl_resumed_from_step"]:
        print(f"note: the RL run was resumed at step {result['rl_resumed_from_step']}: its training time "
              "(the budget above) covers the resumed part only")  # fmt: skip
    check = result["check_vs_evaluate_after"]
    if check:
        print(f"check: on the run's own {check['tasks']} held-out tasks the SFT model scores "
              f"{check['accuracy_here']:.0%} here, {check['accuracy_committed']:.0%} in evaluate.after "
              f"(per-task agreement {check['agreement']:.0%})")  # fmt: skip
    bench.figure("result", result)
    for name, seconds in result["eval_wall_s"].items():
        bench.add_timing(f"{name} evaluation", [seconds])
    bench.add_timing("continued SFT (wall)", [result["continued_sft_wall_s"]])
    rows = {r["model"]: r for r in result["models"]}
    for name in (args.candidate, "continued_sft"):  # each against the SFT model, in points
        delta = rows[name].get("delta_accuracy") or {}
        bench.figure(f"{name} - sft accuracy", delta.get("delta"))
    baseline = rows["continued_sft"]["accuracy"]  # the candidate against the baseline it must beat
    if baseline:
        bench.ratio(f"{args.candidate} / continued SFT accuracy", rows[args.candidate]["accuracy"], baseline)


if __name__ == "__main__":
    main(run, __doc__, extra=arguments)
