"""The gate step: the promotion gate's verdict on a candidate's evaluation as an artifact.

The artifact holds ``verdict.json`` (:class:`coa.registry.gate.Verdict`); its summary is the
same verdict, which the nightly flow applies to the registry (:func:`coa.registry.gate.apply`).
"""

from __future__ import annotations

import json

from coa.registry.config import GateConfig
from coa.steps import Build, Stage, Step, StepInput

GATE = "gate"
VERDICT_FILE = "verdict.json"


def gate_step(name: str, config: GateConfig, candidate: StepInput, champion: StepInput | None) -> Step:
    """The promotion gate's verdict on ``candidate`` (an eval.v1 table) against ``champion``;
    ``name``: the registry name the candidate competes for (the artifact's name)."""
    return STAGE.step(config, {"candidate": candidate, "champion": champion}, artifact=name)


def _build_gate(b: Build) -> None:
    from coa.registry.gate import decide

    config: GateConfig = b.step.config
    champion = b.optional("champion")
    verdict = decide(
        config, b.table("candidate").uri, champion.ref.uri if champion and champion.ref else None
    )
    b.writer.write_file(VERDICT_FILE, json.dumps(verdict.to_dict(), indent=2, default=str))
    b.report(verdict)


STAGE = Stage(
    name=GATE,
    kind="gate",
    build=_build_gate,
    config=GateConfig,
    expects={"candidate": "eval.v1", "champion": "eval.v1"},
    describe="promotion gate: lineage checks, paired bootstrap per benchmark, primary gain",
)
