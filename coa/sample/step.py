"""The sampling step: a model's k attempts at the training tasks → a ``rollouts`` table (rollout.v1).

Inputs: ``model`` (the round's SFT model), ``tasks`` (the training tasks, task.v1) and, when the
tools search locally, ``encyclopedia`` (the synthetic step's document.v1 table the search serves).
The key hashes the config, the round, the tools, the task table, the encyclopedia and the model
artifact, so a rerun reuses
the committed samples. The lineage's ``sampled`` names the round and the model; curation reads it
to label the student's rows (``teacher``: ``student-r<round>``). The prompts are the ones the model
was trained on: its conversion's style and variants, read from its lineage
(:func:`coa.lineage.trained_on`, :func:`coa.format.trained.prompt_format`; ``sampling.prompt_style``
and ``variants`` override them), recorded as the lineage's ``prompts``. The tools are the student's
(:func:`coa.plan.choices.eval_tools`): the ones it is evaluated with.

Sampling at a temperature is seeded (``seed``). With the ``hf`` backend under the engine's
``lockstep`` schedule (``schedule: auto`` picks it) the batches depend on the tasks alone, so a rerun
draws the same samples on one machine; another CPU's kernels round differently, and ``hf_batched``'s
continuous batching follows timing. The content key is what makes a round repeat anywhere: a rerun
reuses the committed samples.
"""

from __future__ import annotations

from typing import Any

import schemas
from coa.errors import UserError
from coa.format.trained import of_conversion, prompt_format
from coa.lineage import trained_on
from coa.sample.config import SampleConfig
from coa.sample.core import counts, sample_tasks, select
from coa.sample.summary import SampleSummary
from coa.steps import Build, Stage, Step, StepInput
from coa.tools.build import build_toolbox, check_tools
from coa.tools.collection import INPUT as ENCYCLOPEDIA
from coa.tools.collection import read_collection
from coa.tools.config import ToolsConfig

ROLLOUTS_TABLE = "rollouts"


def step(
    config: SampleConfig,
    tools: ToolsConfig,
    model: StepInput,
    tasks: StepInput,
    round_: int,
    name: str = "sample",
    encyclopedia: StepInput | None = None,
) -> Step:
    """``config.samples`` attempts of ``model`` (the round ``round_`` model) at each task of ``tasks``;
    the local search serves ``encyclopedia`` (the synthetic step's table; None: no local search)."""
    return STAGE.step(
        config,
        {"model": model, "tasks": tasks, ENCYCLOPEDIA: encyclopedia},
        name=name,
        identity={"round": round_, "tools": tools.model_dump(mode="json")},
        describe=f"the round-{round_} student's {config.samples} samples per training task",
    )


def open_policy(config: SampleConfig, model: str) -> Any:
    """The policy of ``config.backend`` on the model folder ``model``."""
    if config.backend == "hf":
        from coa.rollout.policies.hf import HFPolicy

        return HFPolicy(model, max_batch=config.max_batch)
    from coa.rollout.policies.hf_batched import HFBatchedPolicy

    return HFBatchedPolicy(model, max_batch=config.max_batch)


def _build(b: Build) -> None:
    config: SampleConfig = b.step.config
    round_ = int(b.step.identity["round"])
    tools = ToolsConfig.model_validate(b.step.identity["tools"])
    collection = read_collection(b.optional(ENCYCLOPEDIA))
    # sampling calls the evaluation's tools: a dead endpoint (or nothing to search locally) fails now
    check_tools(tools, "evaluate.tools", collection)
    model = b.model("model")
    found = trained_on(model.ref.uri, b.store.settings) if model.ref is not None else None
    trained = of_conversion(found.uri, found.config) if found is not None else None
    prompts = prompt_format(config.prompt_style, config.variants, trained)  # the model's, unless set
    config = config.model_copy(update={"prompt_style": prompts.style, "variants": dict(prompts.variants)})
    b.writer.extra_lineage["prompts"] = prompts.lineage()
    rows = select(b.table("tasks").read().to_pylist(), config)
    if not rows:
        raise UserError(
            f"sample: no training task of families {list(config.families or [])}: "
            "set sampling.families to families the task table holds"
        )
    import torch

    torch.manual_seed(config.seed)
    policy = open_policy(config, model.local_path())
    root = b.store.root if "://" not in b.store.root else None
    toolbox = build_toolbox(tools, root, collection=collection, fix="evaluate.tools")
    try:
        out = sample_tasks(rows, policy, toolbox, config, round_, b.progress)
    finally:
        close = getattr(toolbox, "close", None)
        if close is not None:
            close()
    b.writer.write_table(ROLLOUTS_TABLE, schemas.ROLLOUT.from_rows(out), schemas.ROLLOUT)
    by_family = counts(out, {r["task_id"]: r["family"] for r in rows})
    b.writer.extra_lineage["sampled"] = {"round": round_, "model": model.name}
    b.report(SampleSummary(round=round_, model=model.name, families=by_family))


STAGE = Stage(
    name="sample",
    kind="rollouts",
    build=_build,
    config=SampleConfig,
    expects={"tasks": "task.v1", ENCYCLOPEDIA: "document.v1"},
    produces={ROLLOUTS_TABLE: schemas.ROLLOUT.id},
    summary=SampleSummary,
    describe="the student's samples per training task",
    runs_model=True,
)
