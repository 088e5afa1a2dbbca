"""Reproducible web evaluation: record the tools' observations once, replay them, same rows twice.

The student is the tiny model the evaluation tests build; the tasks are the GAIA dev fixture's
first tasks; the tools are the local search over the synthetic step's encyclopedia and the crawler
(recorded on the first run, replayed after).
A scripted policy that always searches and crawls checks the replay of real calls through the same
step (the random tiny model rarely closes a tool tag).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coa import io
from coa.evaluate import step as eval_step
from coa.evaluate.config import EvalConfig
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.steps import ModelInput, StepResult, TableInput, run_step
from coa.tools.config import ToolsConfig
from coa.tools.toolbox import ReplayMiss

from .test_stage import tiny_model  # noqa: F401 (fixture)

WALL_CLOCK = ("latency_s",)
TOOLS = ToolsConfig(enabled=("web_search", "crawl_page"), record="auto")


Gaia = tuple[TableInput, TableInput]
"""The GAIA tasks, and the encyclopedia the local search serves (the synthetic step's table)."""


@pytest.fixture(scope="module")
def gaia(tmp_path_factory: pytest.TempPathFactory) -> Gaia:
    from coa.synthetic import SyntheticConfig
    from coa.synthetic import step as synthetic
    from coa.tasksets import TasksConfig
    from coa.tasksets import step as tasksets
    from coa.tasksets.config import TaskSourceConfig
    from tests.conftest import FIXTURES

    store = io.Store(str(tmp_path_factory.mktemp("tasks")))
    source = TaskSourceConfig(path=str(FIXTURES / "gaia_dev_103.json"))
    ref = run_step(tasksets.step(TasksConfig(name="gaia", sources=(source,))), store).ref
    pages = run_step(synthetic.step(SyntheticConfig(train={"multihop": 1}, heldout={})), store).ref
    return TableInput(ref, "tasks"), TableInput(pages, synthetic.ENCYCLOPEDIA_TABLE)


def config(record: str, recording: Path, new_tokens: int = 24) -> EvalConfig:
    return EvalConfig(
        max_turns=3, max_new_tokens=new_tokens, max_total_tokens=4 * new_tokens, prompt_style="brief",
        batch_size=1, limit_per_benchmark=3, tool_record=record, recording=str(recording),
    )  # fmt: skip


def evaluate(
    store: Path, gaia: Gaia, model: str, record: str, recording: Path, new_tokens: int = 24
) -> StepResult:
    tasks, pages = gaia
    model_input = ModelInput(external=model)
    step = eval_step.step(
        config(record, recording, new_tokens), TOOLS, tasks, model_input, encyclopedia=pages
    )
    return run_step(step, io.Store(str(store)))


def rows(result: StepResult) -> pa.Table:
    table = io.read_table(result.ref, "eval")
    return table.drop_columns(list(WALL_CLOCK))


def test_replayed_gaia_evaluation_of_the_tiny_student_is_identical_twice(
    gaia: Gaia,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    recording = tmp_path / "recording"
    live = evaluate(tmp_path / "live", gaia, str(tiny_model), "record", recording)
    first = evaluate(tmp_path / "a", gaia, str(tiny_model), "replay", recording)
    second = evaluate(tmp_path / "b", gaia, str(tiny_model), "replay", recording)
    assert not first.reused and not second.reused and first.ref.uri != second.ref.uri
    assert rows(first).equals(rows(second)) and rows(first).equals(rows(live))
    as_bytes = [json.dumps(rows(r).to_pylist(), sort_keys=True).encode() for r in (first, second)]
    assert as_bytes[0] == as_bytes[1]
    assert rows(first).num_rows == 3 and set(rows(first).column("scorer").to_pylist()) == {"gaia"}
    for result, mode in ((live, "live"), (first, "replayed"), (second, "replayed")):
        tools = io.read_lineage(result.ref)["tools"]
        document = json.loads(io.read_file(result.ref, "metrics.json"))
        assert tools["mode"] == mode and document["tools"] == tools
        assert tools["recording"] == str(recording)
        assert document["coverage"]["gaia_dev_103"] == {"tasks_in_set": 103, "tasks_scored": 3, "runs": 3}
        assert document["scorers"]["gaia_dev_103"]["scorers"][0]["name"] == "gaia"
        page = io.read_file(result.ref, "report.html").decode()
        assert f"Tools: {mode}" in page and "How each figure is computed" in page and "SUBSET" in page
        assert (
            "gaia_dev_103: pass@1" in result.summary["headline"]
            and "(3 of 103 tasks" in result.summary["headline"]
        )
    assert (
        io.read_lineage(first.ref)["tools"]["observations_digest"]
        == io.read_lineage(second.ref)["tools"]["observations_digest"]
    )


def _searching_policy(model: str) -> Any:
    codec = Codec.from_pretrained(model)
    search = "<think>\nLook it up.\n</think>\n<web_search>\nKelmo\n</web_search>"
    crawl = "<think>\nRead it.\n</think>\n<crawl_page>\nlocal://doc/company-0001\n</crawl_page>"
    answer = "<think>\nDone.\n</think>\n<answer>\n34689\n</answer>"
    return ScriptedPolicy(codec, {"<|im_start|>user": [search, crawl, answer]}, name="scripted-searcher")


def test_replay_answers_every_search_and_crawl_from_the_recording(
    gaia: Gaia,
    tiny_model: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(eval_step, "open_generator", lambda cfg, model: _searching_policy(model))
    recording = tmp_path / "recording"
    live = evaluate(tmp_path / "live", gaia, str(tiny_model), "record", recording, 200)
    replayed = [evaluate(tmp_path / s, gaia, str(tiny_model), "replay", recording, 200) for s in ("a", "b")]
    live_tools = io.read_lineage(live.ref)["tools"]
    assert live_tools["mode"] == "live" and live_tools["calls"] == 6 and live_tools["live_calls"] == 6
    for result in replayed:
        tools = io.read_lineage(result.ref)["tools"]
        assert tools["mode"] == "replayed" and tools["replayed_calls"] == 6 and tools["live_calls"] == 0
        assert tools["observations_digest"] == live_tools["observations_digest"]
        assert rows(result).equals(rows(live))
    table = rows(replayed[0]).to_pylist()
    assert all(r["n_tool_calls"] == 2 for r in table)
    assert [r["correct"] for r in table] == [True, False, False]  # only the first task's gold is 34689
    with pytest.raises(ReplayMiss):  # nothing recorded there: a replay never goes live
        evaluate(tmp_path / "c", gaia, str(tiny_model), "replay", tmp_path / "empty-recording", 200)
