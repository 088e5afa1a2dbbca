"""The RL step: an SFT model + the ``rl_prompts`` of a convert artifact → a ``model`` artifact.

The artifact holds ``model/`` (weights and tokenizer), the ``rollouts`` table (``rollout.v1``: every
episode the run generated, kept or dropped), ``rl_result.json`` and ``rl_curves.png`` (reward per
term, entropy, zero-variance share; the held-out score when measured). Its lineage names the
starting model, the prompts (upstream content hash), the reward config, the steps planned and run,
the held-out curve, the reward-hacking ``alarm`` (None when it never fired) and the learning
signal (:mod:`coa.rl.signal`: groups that held a correct episode; a warning when none did).

**Where it runs.** ``launcher: auto`` trains in this process on a CPU and launches ``accelerate
launch --config_file <accelerate_config> -m coa.rl.grpo --config resolved.yaml`` when a CUDA GPU is
present (the trainer kit's launcher, :mod:`coa.kit.launch`, as SFT's). Checkpoints go to
``{root}/checkpoints/model/<name>-<key>`` (as SFT's); a rerun after a kill resumes from the last
one. An entropy collapse commits the evidence (rollouts, curves, no model) and fails the step with
the guard's message.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coa.errors import UserError
from coa.kit.launch import launch, resolve_launcher, work_dir
from coa.rl.config import RL, EntropyCollapse, RLResult, RLRunConfig, RLStageConfig
from coa.rl.family import EVAL_COLUMNS, pick_family, unreachable_families
from coa.rl.signal import learning_signal
from coa.rl.summary import RLCollapsed, RLSummary
from coa.steps import Build, ModelInput, Stage, Step, StepInput, TableInput
from coa.tools.collection import INPUT as ENCYCLOPEDIA
from coa.tools.collection import Collection

PROMPTS_TABLE = "rl_prompts"
ROLLOUTS_TABLE = "rollouts"
MODEL_FOLDER = "model"
ADAPTER_FOLDER = "adapter"
RESULT_FILE = RL.result_file
CURVES_PNG = "rl_curves.png"
ENCYCLOPEDIA_FILE = "encyclopedia.parquet"
"""The run's copy of its encyclopedia input (what the launched trainer's local search serves)."""

log = logging.getLogger("coa.rl")


def step(
    config: RLStageConfig,
    base: StepInput,
    prompts: StepInput,
    name: str = "rl",
    callbacks: Sequence[Any] = (),
    evaluation: StepInput | None = None,
    encyclopedia: StepInput | None = None,
) -> Step:
    """Train ``base`` (the SFT model) with GRPO/DAPO on the ``rl_prompts`` of ``prompts``.

    With ``rl.families: auto``, ``evaluation`` (an ``eval.v1`` table of ``base`` on held-out tasks)
    picks the family (:mod:`coa.rl.family`); it is not read otherwise. The rollouts' local search
    serves ``encyclopedia`` (the synthetic step's ``document.v1`` table the tasks were drawn from;
    None: no local search)."""
    inputs: dict[str, StepInput] = {"base": base, "prompts": prompts}
    if encyclopedia is not None:
        inputs[ENCYCLOPEDIA] = encyclopedia
    if config.families == "auto":
        if evaluation is None:
            raise UserError(
                "rl.families: auto picks the family from an evaluation of the SFT model on held-out tasks: "
                "configure `evaluate` and `synthetic` (coa run), pass `--eval` (coa rl), or name the "
                "families (rl.families: [math])"
            )
        inputs["evaluation"] = evaluation
    options = {"callbacks": tuple(callbacks)} if callbacks else {}
    return STAGE.step(config, inputs, name=name, options=options)


def copy_encyclopedia(
    source: TableInput | ModelInput | None, out: Path
) -> tuple[Collection | None, str | None]:
    """The step's ``encyclopedia`` input as the collection the preflight checks, and the Parquet copy
    in ``out`` that the trainer's local search is built from (:attr:`RLRunConfig.encyclopedia`, read
    by :func:`coa.rl.grpo.rollout_toolbox`, in this process or a launched one); (None, None) without
    one."""
    if source is None:
        return None, None
    if not isinstance(source, TableInput):
        raise TypeError(f"the {ENCYCLOPEDIA} input must be a document.v1 table, not the model {source.name}")
    import pyarrow.parquet as pq

    table = source.read()
    out.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out / ENCYCLOPEDIA_FILE)
    return Collection.from_table(table), str(out / ENCYCLOPEDIA_FILE)


def preflight(config: RLStageConfig, collection: Collection | None = None) -> None:
    """Check the endpoints the rollouts call (the search tools', the judge's) and that a local search
    has its ``collection`` before the trainer is launched: a dead or wrong endpoint fails the stage in
    seconds with the key to fix (exit 3), not after the model is loaded and every episode has spent
    its retries."""
    from coa.tools.build import check_tools

    check_tools(config.tools, "rl.tools", collection)
    if config.judge is not None:
        from coa.scoring.judge import LLMJudge

        LLMJudge(config.judge).check(fix="rl.judge.endpoints")


def _build(b: Build) -> None:
    import schemas
    from coa.rl.rollout_hook import ROLLOUTS_DIR, read_rollouts

    callbacks: Sequence[Any] = b.step.options.get("callbacks", ())

    config: RLStageConfig = b.step.config
    base, prompts = b.model("base"), b.table("prompts")
    out = work_dir(b.store.root, b.writer.uri)
    params = config.model_dump()
    choice = None
    if config.families == "auto":
        rows = prompts.read(["family", "variant"]).to_pydict()
        variants: dict[str, set[str]] = {}
        for family, variant in zip(rows["family"], rows["variant"], strict=True):
            variants.setdefault(family, set()).add(variant)
        unreachable = unreachable_families(variants, config.tools.enabled)
        choice = pick_family(b.table("evaluation").read(list(EVAL_COLUMNS)), variants, unreachable)
        params["families"] = (choice.family,)
        log.info("rl: families auto -> %s (%s; %s)", choice.family, choice.rule, choice.accuracy)
        if choice.warning:
            log.warning("rl: %s", choice.warning)
    collection, documents = copy_encyclopedia(b.optional(ENCYCLOPEDIA), out)
    preflight(config, collection)
    observations = b.store.root if "://" not in b.store.root else None
    run_config = RLRunConfig(
        **params,
        base_model=base.local_path(),
        output_dir=str(out),
        observation_root=observations,
        encyclopedia=documents,
    )
    b.writer.extra_lineage.update(
        {
            "base_model": base.name,
            "prompts": {"uri": prompts.uri, "content_hash": prompts.ref.content_hash, "rows": prompts.rows()},
            "rewards": config.rewards.model_dump(mode="json"),
            "families": list(params["families"]) if params["families"] is not None else None,
            "family_choice": choice.model_dump(mode="json") if choice else None,  # rl.families: auto
        }
    )
    try:
        if resolve_launcher(config) == "in_process":
            from coa.kit.callbacks import progress_callback
            from coa.rl.grpo import run_rl

            progress = [progress_callback(b.progress)] if b.progress is not None else []
            result = run_rl(prompts.read(), run_config, out, resume=True, callbacks=[*callbacks, *progress])
        else:
            launched = launch(
                RL, prompts.read(), run_config, out, config, b.progress
            )  # accelerate or torchrun
            result = RLResult.model_validate(launched)
    except EntropyCollapse as e:
        b.writer.write_table(ROLLOUTS_TABLE, read_rollouts(out / ROLLOUTS_DIR), schemas.ROLLOUT)
        b.report(RLCollapsed(entropy_collapse=str(e)))
        b.fail(str(e))
        return
    b.writer.put_folder(MODEL_FOLDER, result.model_dir)
    if result.adapter_dir is not None:  # rl.lora: model/ is merged; the adapter alone, for a server
        b.writer.put_folder(ADAPTER_FOLDER, result.adapter_dir)
    rollouts = read_rollouts(out / ROLLOUTS_DIR)
    b.writer.write_table(ROLLOUTS_TABLE, rollouts, schemas.ROLLOUT)
    ids = prompts.read(["prompt_id", "family"]).to_pydict()
    signal = learning_signal(rollouts, dict(zip(ids["prompt_id"], ids["family"], strict=True)))
    if signal.warning:
        log.warning("rl: %s", signal.warning)
    b.writer.put_file(CURVES_PNG, result.curves_png)
    b.writer.write_file(RESULT_FILE, result.model_dump_json(indent=2))
    b.writer.extra_lineage.update(
        {
            "steps_planned": result.steps_planned,
            "steps_run": result.global_step,
            "judge_audit": result.judge_audit,  # None: no judge (web answers by exact match / F1)
            "heldout": {"prompts": result.heldout_prompts, "points": result.heldout},
            "alarm": result.alarm,  # the reward-hacking alarm's first firing; None = never
            # groups with a correct episode, per family
            "learning_signal": signal.model_dump(mode="json") | {"warning": signal.warning},
            # where episodes came from, sync or async, trainer idle share, staleness, stale drops
            "rollout": {"backend": result.rollout_backend, "mode": result.mode, **result.rollout_stats},
        }
    )
    last = result.curves[-1] if result.curves else {}
    b.report(
        RLSummary(
            steps_planned=result.steps_planned,
            steps_run=result.global_step,
            rollouts=result.rollouts,
            device=result.device,
            train_runtime_s=result.train_runtime_s,
            final_reward=last.get("reward"),  # a logged point holds the keys that were logged
            final_entropy=last.get("entropy"),
            curves=tuple(result.curves[:: max(1, len(result.curves) // 50)]),
            heldout=tuple(result.heldout),
            alarm=result.alarm,
            learning_signal=signal,
            no_signal=signal.warning,
            family_choice=choice,
        )
    )
    b.cleanup.append(lambda: shutil.rmtree(out, ignore_errors=True))


STAGE = Stage(
    name="rl",
    kind="model",
    build=_build,
    config=RLStageConfig,
    expects={"prompts": "rl_prompt.v1", "evaluation": "eval.v1", ENCYCLOPEDIA: "document.v1"},
    produces={ROLLOUTS_TABLE: "rollout.v1"},
    summary=RLSummary,
    describe="agentic RL (GRPO/DAPO on multi-turn tool rollouts)",
    runs_model=True,
)


def read_result(ref: Any) -> RLResult:
    """The :class:`RLResult` of a committed RL artifact."""
    from coa import io

    return RLResult.model_validate_json(io.read_file(ref, RESULT_FILE))
