"""The encyclopedia travels with the data: the synthetic step commits it as its ``encyclopedia``
table, and every step whose search is local (collect, evaluate, sample, RL) takes that table as an
input, so RL searches the documents its tasks were drawn from and its key follows their content."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from coa import io
from coa.errors import UserError
from coa.plan import load_pipeline_config, plan
from coa.plan.nightly import nightly_plan
from coa.rl import step as rl
from coa.rl.config import RLRunConfig, RLStageConfig
from coa.rl.grpo import rollout_toolbox
from coa.steps import ModelInput, Step, TableInput, Upstream, address, resolve, run_step
from coa.synthetic import SyntheticConfig, hop_query
from coa.synthetic import step as synthetic
from coa.tools.config import ToolsConfig
from coa.tools.search import local_url

from .plan_keys import pinned, planned_keys

REPO = Path(__file__).resolve().parents[2]
ENCYCLOPEDIA = Upstream("synthetic", "encyclopedia")
LOCAL_SEARCH_STAGES = {"collect", "collect.retry", "evaluate", "sample", "rl"}
SEARCH = ToolsConfig(enabled=("web_search",), record="off")


def _searching(steps: list[Step]) -> dict[str, Step]:
    return {s.name: s for s in steps if s.builder in LOCAL_SEARCH_STAGES}


def test_every_step_that_searches_takes_the_synthetic_steps_encyclopedia() -> None:
    overrides = ["rounds=2", "rl.families=auto", "collect.retry_failed=true"]
    steps = _searching(plan(load_pipeline_config(REPO / "configs" / "demo.yaml", overrides)))
    assert {"collect", "collect.retry", "collect.heldout", "sample.r1", "rl", "evaluate.after_rl"} <= set(
        steps
    )
    for step in steps.values():
        assert step.inputs["encyclopedia"] == Upstream("synthetic", "encyclopedia"), step.name
        assert step.expects["encyclopedia"] == "document.v1", step.name
    night = _searching(nightly_plan(load_pipeline_config(REPO / "configs" / "nightly.yaml"), None))
    assert {"collect", "rl", "evaluate.candidate"} <= set(night)
    assert all(s.inputs["encyclopedia"] == ENCYCLOPEDIA for s in night.values())


def test_the_encyclopedia_is_in_rls_key_through_its_input(tmp_path: Path) -> None:
    """Another encyclopedia seed changes RL's key; so does the encyclopedia table's content alone,
    every other input held."""
    store = io.Store(str(tmp_path))
    demo = REPO / "configs" / "demo.yaml"
    with pinned("pinned"):
        keys = [
            planned_keys(plan(load_pipeline_config(demo, [f"synthetic.encyclopedia_seed={seed}"])), store)
            for seed in (0, 1)
        ]
        assert keys[0]["synthetic"] != keys[1]["synthetic"] and keys[0]["rl"] != keys[1]["rl"]
        step = next(s for s in plan(load_pipeline_config(demo)) if s.name == "rl")
        tasks = run_step(synthetic.step(SyntheticConfig(train={"multihop": 2}, heldout={})), store)
        # one stand-in for RL's other upstreams, the same both times
        ref = tasks.ref.model_copy(update={"uri": f"{tasks.ref.uri}-stand-in", "content_hash": "stand-in"})
        stand_in = dataclasses.replace(tasks, ref=ref)
        done = {v.step: stand_in for v in step.inputs.values() if isinstance(v, Upstream)} | {
            "synthetic": tasks
        }
        inputs = resolve(step, done)
        assert inputs["encyclopedia"] == TableInput(tasks.ref, "encyclopedia")
        other = tasks.ref.model_copy(update={"content_hash": "another-encyclopedia"})
        moved = {**inputs, "encyclopedia": TableInput(other, "encyclopedia")}
        assert address(step, inputs, store)[1] != address(step, moved, store)[1]


def test_rls_search_finds_the_entities_of_its_tasks(tmp_path: Path) -> None:
    """RL's tool index is built from the table the synthetic step committed (through the RL step's
    copy of its input and the run config a launched trainer reads): the gold page of each hop of a
    multi-hop task is found by its search, and with another seed's encyclopedia none is."""
    store = io.Store(str(tmp_path / "store"))
    config = SyntheticConfig(train={"multihop": 6}, heldout={}, encyclopedia_seed=3, encyclopedia_size=60)
    tasks = run_step(synthetic.step(config), store)
    assert tasks.summary["documents"] == tasks.ref.rows("encyclopedia") > 60
    prompts = Upstream("convert", "rl_prompts")
    step = rl.step(RLStageConfig(tools=SEARCH), ModelInput(external="m"), prompts, encyclopedia=ENCYCLOPEDIA)
    table = resolve(step, {"synthetic": tasks, "convert": tasks})["encyclopedia"]
    collection, copy = rl.copy_encyclopedia(table, tmp_path / "run")
    assert collection is not None and copy is not None
    metadata = io.read_table(tasks.ref, "train").column("metadata").to_pylist()
    hops = [hop for meta in metadata for hop in json.loads(meta)["path"]]
    assert len(hops) >= 12

    def found(run: RLRunConfig) -> int:
        search = rollout_toolbox(run).functions["web_search"]
        # the hop's gold page: its subject's, at the url the task's path names, stating the object
        return sum(
            f"[{hop['subject']}]({local_url(hop['doc_id'])})"
            in (seen := search(hop_query(hop["relation"], hop["subject"])))
            and hop["object"] in seen
            for hop in hops
        )

    run = RLRunConfig(tools=SEARCH, base_model="m", encyclopedia=copy)
    assert found(run) == len(hops)
    other = run_step(synthetic.step(config.model_copy(update={"encyclopedia_seed": 4})), store)
    _, elsewhere = rl.copy_encyclopedia(TableInput(other.ref, "encyclopedia"), tmp_path / "other")
    assert found(run.model_copy(update={"encyclopedia": elsewhere})) == 0


def test_a_local_search_without_an_encyclopedia_says_where_it_comes_from() -> None:
    """No synthetic section (tasks imported, say): no encyclopedia input, and a local search refuses
    to start, naming the way out; a remote search or no search needs none."""
    cfg = load_pipeline_config(
        REPO / "configs" / "demo.yaml",
        [
            "synthetic=null",
            f"tasks.sources=[{{path: {REPO / 'configs/data/sample_tasks.jsonl'}, family: mhqa}}]",
            "tools.code_only.enabled=[web_search, code]",  # the demo's rl.tools
            "rl.families=[mhqa]",
        ],
    )
    steps = _searching(plan(cfg))
    assert {"collect", "rl"} <= set(steps)
    assert all(s.inputs.get("encyclopedia") is None for s in steps.values())
    assert cfg.rl is not None
    refused = (
        r"web_search is a local search \(rl\.tools\.search\.provider: local_bm25\) but this step was given "
        r"no encyclopedia.*Add a `synthetic` section"
    )
    with pytest.raises(UserError, match=refused):
        rl.preflight(cfg.rl)
    with pytest.raises(UserError, match=r"rl\.tools\.search\.index_dir"):
        rollout_toolbox(RLRunConfig(tools=cfg.rl.tools, base_model="m"))
    assert "code" in rollout_toolbox(RLRunConfig(tools=ToolsConfig(enabled=("code",)), base_model="m")).tools
