"""Step specs: what crosses to another machine, rebuilt there, refused when its key would differ."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa import io
from coa.errors import InfraError
from coa.nightly.step import new_tasks_step
from coa.plan.spec import SpecRefused, StepSpec, accept, spec_of
from coa.registry.config import GateConfig
from coa.registry.step import gate_step
from coa.steps import ModelInput, TableInput, resolve, run_step
from tests import storage_cases as cases


def _spec(store: io.Store) -> StepSpec:
    tasks = cases.write_tasks(store, {"spec": "unit"}, n=4)
    step = new_tasks_step(TableInput(tasks, "tasks"), {})
    return spec_of(step, resolve(step, {}), store)


def test_a_spec_crosses_as_json_and_builds_the_artifact_its_key_names(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    spec = _spec(store)
    received = StepSpec.model_validate_json(spec.model_dump_json())
    assert received == spec and spec.version == 1 and spec.builder == "nightly.new_tasks"
    step, inputs = accept(received, store)
    result = run_step(step.with_inputs(inputs), store)
    assert (result.ref.uri, result.ref.key) == (spec.uri, spec.key) and result.ref.rows() == 4


@pytest.mark.parametrize(
    ("change", "part"),
    [
        ({"config": {"exclude": "nothing"}}, "config differs"),
        ({"code_version": "0+src.other"}, "code version differs"),
        ({"key": "0" * 16}, "key differs"),
    ],
)
def test_a_spec_whose_key_differs_is_refused_naming_the_part(
    tmp_path: Path, change: dict[str, object], part: str
) -> None:
    store = io.Store(str(tmp_path))
    spec = _spec(store)
    with pytest.raises(SpecRefused, match=part) as refused:
        accept(spec.model_copy(update=change), store)
    assert refused.value.kind == "check failed" and not io.lookup(spec.uri)  # nothing was built


def test_an_input_with_other_content_is_refused_by_name(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    spec = _spec(store)
    moved = spec.inputs["tasks"].model_copy(update={"content_hash": "f" * 64})
    with pytest.raises(SpecRefused, match=r"input 'tasks' differs: .* has content hash"):
        accept(spec.model_copy(update={"inputs": {"tasks": moved}}), store)


def test_a_config_this_side_cannot_read_is_refused_naming_the_field(tmp_path: Path) -> None:
    store = io.Store(str(tmp_path))
    step = gate_step("agent", GateConfig(bootstrap_samples=200), ModelInput(external="m"), None)
    spec = spec_of(step, resolve(step, {}), store)
    assert accept(spec, store)[0].config == GateConfig(bootstrap_samples=200)
    newer = {**spec.config, "min_gain_pct": 5}  # a field the flow's code has and this side's has not
    with pytest.raises(SpecRefused, match=r"config differs \(min_gain_pct\)"):
        accept(spec.model_copy(update={"config": newer}), store)


def test_a_worker_with_another_store_is_an_infrastructure_error(tmp_path: Path) -> None:
    spec = _spec(io.Store(str(tmp_path / "flow")))
    with pytest.raises(InfraError, match="would land at .* must share the store"):
        accept(spec, io.Store(str(tmp_path / "worker")))
    gone = spec.inputs["tasks"].model_copy(update={"uri": str(tmp_path / "elsewhere")})
    with pytest.raises(InfraError, match="no committed artifact"):
        accept(spec.model_copy(update={"inputs": {"tasks": gone}}), io.Store(str(tmp_path / "flow")))
