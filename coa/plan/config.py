"""The config of a pipeline or nightly run: one section per stage, where steps run, and promotion.

:func:`load_pipeline_config` reads a profile (code defaults → YAML with ``inherit`` → dotted
overrides) into :class:`PipelineConfig`; the plans (:mod:`coa.plan.pipeline`, :mod:`coa.plan.nightly`)
turn it into steps. A stage whose section is absent (``null``) has no step.

Endpoints and tool sets are declared once at the top of a profile, keyed by name, and named from
the sections that use them (:func:`resolve_names`, the one place they are put where they are named,
before any section is validated)::

    endpoints:
      teacher: {base_url_env: COA_TEACHER_BASE_URL, model: Qwen/Qwen2.5-72B-Instruct}
      judge: {base_url: "http://judge:8000/v1", model: Qwen/Qwen2.5-7B-Instruct}
    tools:
      web: {search: {provider: serper}}
    collect: {llm: {endpoints: [teacher], budget_tokens: 200000000}, tools: web}
    rl: {judge: judge, tools: web}

Every stage then sees the same config (and its step the same key) as with the declaration written
inline, which a profile may still do. The places a name may stand are :data:`ENDPOINT_SLOTS`,
:data:`LLM_SLOTS` and :data:`TOOL_SLOTS`; a name nothing declares is refused, saying what is.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, model_validator

from coa.collect.config import CollectConfig
from coa.config import (
    Overrides,
    StrictModel,
    apply_overrides,
    build_config,
    canonical_json,
    load_yaml_layers,
    overrides_of,
)
from coa.convert.config import ConvertConfig
from coa.curate.config import CurateConfig
from coa.evaluate.config import EvalConfig
from coa.execution import ExecutionConfig
from coa.llm.config import EndpointConfig
from coa.model.config import StudentConfig
from coa.registry.config import GateConfig
from coa.rl.config import RLStageConfig
from coa.sample.config import SampleConfig
from coa.synthetic import SyntheticConfig
from coa.tasksets.config import TasksConfig
from coa.tools.config import ToolsConfig
from coa.tracking.config import TrackingConfig
from coa.train.config import SFTStageConfig

if TYPE_CHECKING:
    RoundSFTConfig = Overrides
else:
    RoundSFTConfig = overrides_of(
        SFTStageConfig,
        "RoundSFTConfig",
        "Overrides of the `sft` section for SFT rounds 2.. (self-improvement); a key left out keeps sft's.",
        __name__,
    )
    """``round_sft``: the fields of :class:`~coa.train.config.SFTStageConfig`, each optional (one
    declaration of them: this model is made from it)."""


# -- endpoints and tool sets declared once (`endpoints:`, `tools:`), named from the sections ---------

ENDPOINT_SLOTS: tuple[tuple[str, str], ...] = (("evaluate", "endpoint"),)
"""Fields holding one endpoint (:class:`~coa.llm.config.EndpointConfig`): a name stands for it."""
LLM_SLOTS: tuple[tuple[str, str], ...] = (
    ("collect", "llm"),
    ("curate", "judge"),
    ("evaluate", "judge"),
    ("rl", "judge"),
)
"""Fields holding an :class:`~coa.llm.config.LLMConfig`: a name stands for an LLM config of that one
endpoint, and in the long form each item of its ``endpoints`` list may be a name."""
TOOL_SLOTS: tuple[tuple[str, str], ...] = (("collect", "tools"), ("evaluate", "tools"), ("rl", "tools"))
"""Fields holding a :class:`~coa.tools.config.ToolsConfig`: a name stands for it."""


def _plain(value: Any) -> Any:
    """A declaration as the plain data a section is validated from (a model given in code, dumped)."""
    return value.model_dump() if isinstance(value, BaseModel) else copy.deepcopy(value)


def _declared(data: Mapping[str, Any], what: str) -> dict[str, Any]:
    found = data.get(what)
    if found is None:
        return {}
    if not isinstance(found, Mapping):
        raise ValueError(f"`{what}` must map names to declarations (got {type(found).__name__})")
    return {str(name): _plain(body) for name, body in found.items()}


def _endpoints(data: Mapping[str, Any]) -> dict[str, Any]:
    """The declared endpoints, each with its key as its ``name`` (the name caches and lineage use)."""
    out = _declared(data, "endpoints")
    for key, body in out.items():
        if isinstance(body, dict) and body.setdefault("name", key) != key:
            raise ValueError(
                f"endpoints.{key}: its name is its key; remove `name: {body['name']}` or rename the key"
            )
    return out


def _lookup(declared: Mapping[str, Any], name: str, where: str, what: str) -> Any:
    if name not in declared:
        have = ", ".join(sorted(declared)) or "none"
        raise ValueError(
            f"{where}: no {what} named {name!r} (declared under the profile's top-level `{what}:`: {have}); "
            f"declare it there, or write it inline under {where}"
        )
    return copy.deepcopy(declared[name])


def resolve_names(data: Any, only: Collection[tuple[str, str]] | None = None) -> Any:
    """``data`` (a profile, before validation) with every name in a slot (of ``only``: those slots)
    replaced by its declaration; a profile with no names comes back unchanged."""
    if not isinstance(data, Mapping):
        return data
    endpoints, tools = _endpoints(data), _declared(data, "tools")
    out = dict(data)
    if "endpoints" in out:
        out["endpoints"] = endpoints
    for section, field in ENDPOINT_SLOTS + LLM_SLOTS + TOOL_SLOTS:
        if only is not None and (section, field) not in only:
            continue
        body = out.get(section)
        if not isinstance(body, Mapping) or field not in body:
            continue
        value, where = body[field], f"{section}.{field}"
        if (section, field) in TOOL_SLOTS and isinstance(value, str):
            value = _lookup(tools, value, where, "tools")
        elif (section, field) in ENDPOINT_SLOTS and isinstance(value, str):
            value = _lookup(endpoints, value, where, "endpoints")
        elif (section, field) in LLM_SLOTS and isinstance(value, str):
            value = {"endpoints": [_lookup(endpoints, value, where, "endpoints")]}
        elif (section, field) in LLM_SLOTS and isinstance(value, Mapping):
            items = value.get("endpoints") or ()
            if any(isinstance(item, str) for item in items):
                value = dict(value)
                named = f"{where}.endpoints"
                value["endpoints"] = [
                    _lookup(endpoints, item, named, "endpoints") if isinstance(item, str) else item
                    for item in items
                ]
        else:
            continue
        out[section] = {**body, field: value}
    return out


class DispatchConfig(StrictModel):
    """Where the steps run: all in the flow's process, or the GPU steps on their own work pool."""

    mode: Literal["inline", "deployment"] = Field(
        default="inline",
        description="inline: every step in the pipeline flow's process (no worker needed); deployment: the "
        "steps named in gpu_steps run as the `run-one-step` flow of `deployment` (e.g. on the gpu pool).",
    )
    deployment: str = Field(
        default="run-one-step/gpu",
        description="The deployment ('flow-name/deployment-name') that runs one step on the GPU pool.",
    )
    gpu_steps: tuple[str, ...] = Field(
        default=("sft", "sample", "rl"),
        description="Stages dispatched to the deployment (a stage covers its sub-steps, e.g. rl.*, "
        "sample.r1): the ones that run the student (training, and the self-improvement rounds' sampling).",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="Longest wait for a dispatched step's flow run; None = no limit."
    )
    crash_retries: int = Field(
        default=2,
        ge=0,
        description="Times a dispatched step's flow run that crashed (its process or its worker died) is "
        "sent again, each retry resuming from the step's last complete checkpoint; 0: it fails at once.",
    )
    heartbeat_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between the heartbeats a dispatched step's flow run writes to the store "
        "(`leases/<flow run id>.json`) while it builds; the flow that dispatched it watches them.",
    )
    heartbeat_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A dispatched step's flow run that is Running and has not beaten for this long (its "
        "worker or machine died) is marked Crashed by the flow that dispatched it and sent again "
        "(dispatch.crash_retries); a run still queued (Scheduled, Pending) is never declared dead.",
    )

    @model_validator(mode="after")
    def _timeout_spans_beats(self) -> DispatchConfig:
        if self.heartbeat_timeout_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"dispatch.heartbeat_timeout_s ({self.heartbeat_timeout_s:g}) must be at least twice "
                f"dispatch.heartbeat_s ({self.heartbeat_s:g}): one late beat would read as a dead run; "
                "raise heartbeat_timeout_s or lower heartbeat_s"
            )
        return self

    def dispatches(self, step_name: str) -> bool:
        """Whether ``step_name`` runs on the deployment."""
        stage = step_name.split(".")[0]
        return self.mode == "deployment" and (step_name in self.gpu_steps or stage in self.gpu_steps)


class PromotionConfig(StrictModel):
    """Nightly retraining: which registry name the candidate competes for, and how."""

    model_name: str = Field(
        default="coa-agent", description="Registry name whose champion the candidate challenges."
    )
    sft_from: Literal["base", "champion"] = Field(
        default="champion",
        description="Fine-tune the configured base (student section) or tonight's champion (the base when "
        "there is none yet).",
    )
    new_tasks_only: bool = Field(
        default=True, description="Collect only tasks whose ids no earlier night collected."
    )
    previous_nights: int | None = Field(
        default=None, ge=0, description="Earlier nights whose data is curated with tonight's; None = all."
    )
    gate: GateConfig = Field(default_factory=GateConfig, description="The promotion gate.")


class PipelineConfig(StrictModel):
    """The whole pipeline run."""

    run_name: str = Field(default="coa", description="Human-readable name of this pipeline configuration.")
    endpoints: dict[str, EndpointConfig] = Field(
        default_factory=dict,
        description="The LLM endpoints of the run, each declared once under its name (its `name`: the key); "
        "collect.llm, curate.judge, evaluate.judge, rl.judge and evaluate.endpoint name one instead of "
        "repeating it (e.g. `rl.judge: judge`; in collect.llm: `endpoints: [teacher]`). Inline still works.",
    )
    tools: dict[str, ToolsConfig] = Field(
        default_factory=dict,
        description="Tool sets (tools, search providers and their servers, crawl and sandbox limits), each "
        "declared once under a name; collect.tools, evaluate.tools and rl.tools name one (e.g. `rl.tools: "
        "web`) instead of repeating it. Inline still works.",
    )
    synthetic: SyntheticConfig | None = Field(
        default=None, description="Built-in synthetic task families (train + held-out); null = none."
    )
    tasks: TasksConfig = Field(default_factory=TasksConfig, description="Task sets to import (task.v1).")
    collect: CollectConfig | None = Field(
        default=None, description="Teacher collection on the training tasks; null = skip."
    )
    curate: CurateConfig | None = Field(
        default=None, description="Filter, dedup, decontaminate and gate the raw trajectories; null = skip."
    )
    convert: ConvertConfig | None = Field(
        default=None, description="Curated trajectories to CoA SFT examples and RL prompts; null = skip."
    )

    student: StudentConfig | None = Field(
        default=None,
        description="The model to fine-tune (a folder or hub id, or the tiny student built on the spot); "
        "null = no training.",
    )
    sft: SFTStageConfig | None = Field(
        default=None,
        description="Supervised fine-tuning of the student on the converted examples; null = skip.",
    )
    rounds: int = Field(
        default=1,
        ge=1,
        description="SFT rounds (self-improvement): after round r the round-r model samples the training "
        "tasks (`sampling`), its verified-correct attempts are curated beside the teacher's runs, converted, "
        "and round r+1 fine-tunes the round-r model on them; RL follows the last round. 1 = one SFT.",
    )
    sampling: SampleConfig | None = Field(
        default=None,
        description="How the student samples the training tasks between rounds (k samples, temperature, "
        "limits); null = SampleConfig's defaults. Used only with rounds > 1.",
    )
    round_sft: RoundSFTConfig = Field(
        default_factory=RoundSFTConfig,
        description="Overrides of the `sft` section for rounds 2.. (e.g. {max_steps: 3000, warmup_steps: "
        "0}); empty = the same SFT as round 1.",
    )
    rl: RLStageConfig | None = Field(
        default=None,
        description="Agentic RL (GRPO/DAPO on multi-turn tool rollouts) of the SFT model on the converted "
        "RL prompts, evaluated after it; null = skip.",
    )

    evaluate: EvalConfig | None = Field(
        default=None,
        description="Evaluate the student on the held-out synthetic tasks before and after SFT, beside the "
        "teacher's cost on them; null = skip.",
    )

    promotion: PromotionConfig | None = Field(
        default=None,
        description="Nightly retraining (coa/plan/nightly.py): registry name, SFT start, promotion gate.",
    )
    dispatch: DispatchConfig = Field(
        default_factory=DispatchConfig,
        description="Inline (one process) or GPU steps dispatched to a work pool's deployment.",
    )
    execution: ExecutionConfig = Field(
        default_factory=ExecutionConfig,
        description="Where collection, curation and conversion shards run: local (one process) or Ray; never "
        "part of an artifact's identity (the same inputs give the same artifacts either way).",
    )
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig,
        description="Experiment tracking (coa/tracking): none (default, offline), mlflow, tensorboard, "
        "wandb, trackio; never part of an artifact's identity.",
    )

    @model_validator(mode="before")
    @classmethod
    def _names_resolved(cls, data: Any) -> Any:
        """Each endpoint or tool set a section names replaced by its declaration (the one place)."""
        return resolve_names(data)

    @model_validator(mode="after")
    def _rounds_valid(self) -> PipelineConfig:
        if self.round_sft.model_fields_set and self.sft is None:
            raise ValueError("round_sft needs an `sft` section (it overrides it for rounds 2..)")
        self.later_sft()  # round_sft's keys and values must make a valid SFT section
        return self

    def later_sft(self) -> SFTStageConfig | None:
        """The SFT section of rounds 2..: ``sft`` with ``round_sft`` over it."""
        if self.sft is None:
            return None
        if not self.round_sft.model_fields_set:
            return self.sft
        return self.round_sft.over(self.sft)

    def fingerprint(self) -> str:
        """Stable hash of the resolved config."""
        return hashlib.sha256(canonical_json(self.model_dump(mode="json")).encode()).hexdigest()


def load_pipeline_config(path: str | Path | None, overrides: Sequence[str] = ()) -> PipelineConfig:
    """A pipeline profile: code defaults → YAML (with ``inherit``) → dotted ``key=value`` overrides.

    An override beneath a slot that names a declaration (``rl.tools.enabled=[code]`` where the profile
    says ``rl.tools: web``) gives that section its own copy of it with the change; the declaration and
    the other sections naming it stay as they were (``tools.web.enabled=…`` changes them all)."""
    data = load_yaml_layers(path) if path is not None else {}
    keys = [item.split("=", 1)[0].strip() for item in overrides]
    slots = ENDPOINT_SLOTS + LLM_SLOTS + TOOL_SLOTS
    beneath = {slot for slot in slots if any(key.startswith(".".join(slot) + ".") for key in keys)}
    if beneath:
        data = resolve_names(data, beneath)
    config: PipelineConfig = build_config(
        apply_overrides(data, overrides), PipelineConfig, origin=str(path) if path else "config"
    )
    return config
