"""Every kind of step, by the name its stage function gives it (``Step.builder``): how to rebuild
a step from what a step spec carries (its frozen config as JSON, its identity, its inputs).

The other side of a dispatch (:mod:`coa.plan.spec`) never plans: it looks the builder up here and
calls the same stage function the plan called, with the config validated back into its model and
the inputs the spec names. A stage whose step should be dispatchable registers here, and the test
``tests/plan/test_kinds.py`` rebuilds every step of the shipped plans to prove the round trip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from coa.collect import step as collect
from coa.collect.config import CollectConfig
from coa.convert import step as convert
from coa.convert.config import ConvertConfig
from coa.curate import step as curate
from coa.curate.config import CurateConfig
from coa.evaluate import step as evaluate
from coa.evaluate.config import EvalConfig
from coa.evaluate.training_report import round_inputs
from coa.model import step as student
from coa.model.config import StudentConfig
from coa.model.tiny import TinyModelConfig
from coa.plan import nightly
from coa.registry.config import GateConfig
from coa.registry.step import gate_step
from coa.rl import step as rl
from coa.rl.config import RLStageConfig
from coa.sample import step as sample
from coa.sample.config import SampleConfig
from coa.steps import Step, StepInput
from coa.synthetic import SyntheticConfig
from coa.synthetic import step as synthetic
from coa.tasksets import step as tasksets
from coa.tasksets.config import TasksConfig
from coa.tools.config import ToolsConfig
from coa.train import step as sft
from coa.train.config import SFTStageConfig


@dataclasses.dataclass(frozen=True)
class Parts:
    """What a builder gets: the step's name, artifact name, config (JSON), identity and inputs."""

    name: str
    artifact: str
    config: Any
    identity: Mapping[str, Any]
    inputs: Mapping[str, StepInput]

    def input(self, role: str) -> StepInput:
        return self.inputs[role]

    def prefixed(self, suffix: str) -> dict[str, StepInput]:
        """The inputs whose role ends with ``suffix`` (``night0.raw`` → ``night0``)."""
        return {r.removesuffix(suffix): v for r, v in self.inputs.items() if r.endswith(suffix)}


Builder = Callable[[Parts], Step]


def _evaluate(p: Parts) -> Step:
    tools = ToolsConfig.model_validate(p.identity["tools"])
    config = EvalConfig.model_validate(p.config)
    return evaluate.step(config, tools, p.inputs.get("tasks"), p.input("model"), name=p.name)


def _report(p: Parts) -> Step:
    i = p.inputs
    rounds = round_inputs(i)
    return evaluate.report_step(
        p.config["run_name"], i["tasks"], i["before"], i.get("after"), i.get("sft"), i.get("teacher"),
        name=p.name, after_rl=i.get("after_rl"), rl=i.get("rl"), rounds=rounds or None,
    )  # fmt: skip


def _sample(p: Parts) -> Step:
    tools = ToolsConfig.model_validate(p.identity["tools"])
    config = SampleConfig.model_validate(p.config)
    return sample.step(
        config, tools, p.input("model"), p.input("tasks"), int(p.identity["round"]), name=p.name
    )


KINDS: dict[str, Builder] = {
    "synthetic": lambda p: synthetic.step(SyntheticConfig.model_validate(p.config), name=p.name),
    "tasks": lambda p: tasksets.step(TasksConfig.model_validate(p.config), name=p.name),
    "collect": lambda p: collect.step(CollectConfig.model_validate(p.config), p.input("tasks"), name=p.name),
    "collect.retry": lambda p: collect.retry_step(
        CollectConfig.model_validate(p.config), p.input("previous"), p.input("tasks"), name=p.name
    ),
    "curate": lambda p: curate.step(
        CurateConfig.model_validate(p.config),
        p.input("raw"),
        p.input("tasks"),
        name=p.name,
        student=p.inputs.get("student"),
    ),
    "sample": _sample,
    "convert": lambda p: convert.step(
        ConvertConfig.model_validate(p.config), p.input("curated"), p.input("tasks"), name=p.name
    ),
    "student": lambda p: student.step(
        StudentConfig(name=p.artifact, tiny=TinyModelConfig.model_validate(p.config)), p.input("data"), p.name
    ),
    "sft": lambda p: sft.step(
        SFTStageConfig.model_validate(p.config), p.input("base"), p.input("data"), p.name
    ),
    "rl": lambda p: rl.step(
        RLStageConfig.model_validate(p.config),
        p.input("base"),
        p.input("prompts"),
        name=p.name,
        evaluation=p.inputs.get("evaluation"),
    ),  # fmt: skip
    "evaluate": _evaluate,
    "eval-report": lambda p: evaluate.eval_report_step(
        p.name,
        p.input("candidate"),
        p.inputs.get("teacher"),
        p.inputs.get("tasks"),
        p.inputs.get("baseline"),
        bootstrap_samples=p.config["bootstrap_samples"],
    ),  # fmt: skip
    "report": _report,
    nightly.NEW_TASKS: lambda p: nightly.new_tasks_step(
        p.input("tasks"), {r: v for r, v in p.inputs.items() if r != "tasks"}
    ),
    nightly.MERGE: lambda p: nightly.merge_step(
        p.input("raw"), p.input("tasks"), p.prefixed(".raw"), p.prefixed(".tasks")
    ),
    nightly.GATE: lambda p: gate_step(
        p.artifact, GateConfig.model_validate(p.config), p.input("candidate"), p.inputs.get("champion")
    ),
}
"""Builder name (``Step.builder``) → how to rebuild the step from its parts."""


def rebuild(builder: str, parts: Parts) -> Step:
    """The step ``builder`` makes from ``parts`` (a :class:`KeyError` for an unknown builder)."""
    return KINDS[builder](parts)
