"""The exports read back through AFM's own readers (re-implemented from the spec in
``tests/format/afm_rules.py``) over offline-teacher data and the real AFM files, and the ``hf``
export trained by plain TRL with observations left out of the loss."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import schemas
from coa import io
from coa.cli import app
from coa.convert import step as convert_step
from coa.convert.config import ConvertConfig
from coa.curate import step as curate_step
from coa.curate.config import CurateConfig
from coa.format import (
    IGNORE_INDEX,
    afm_target,
    afm_user_turn,
    chat_text,
    label_chat,
    observation_spans,
    parse,
    to_afm_rl_row,
    validate,
)
from coa.format.code import extract_code
from coa.steps import TableInput, run_step
from coa.tasksets import TaskSourceConfig, import_tasks
from tests.format.afm_rules import (
    afm_code_format_ok,
    afm_reward_path,
    afm_score,
    lf_alpaca_turns,
    lf_observations_balanced,
)

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "afm"
runner = CliRunner()


def _fixtures() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"AFM fixture files not found at {FIXTURES} (CI checks out ../shared beside the repo)")
    return FIXTURES


@pytest.fixture(scope="module")
def pipeline(
    tmp_path_factory: pytest.TempPathFactory,
    teacher_runs: list[dict[str, Any]],
    synthetic_tasks: dict[str, Any],
) -> dict[str, Any]:
    """Offline-teacher runs curated and converted once for the module (a private store)."""
    store = io.Store(str(tmp_path_factory.mktemp("store")))

    def artifact(kind: str, table_name: str, table: Any, contract: schemas.Contract) -> io.ArtifactRef:
        writer = store.writer(kind, "t", {"rows": table.num_rows, "kind": kind})
        writer.write_table(table_name, table, contract)
        return writer.commit()

    raw = artifact(
        "trajectories", "trajectories", schemas.TRAJECTORY.from_rows(teacher_runs), schemas.TRAJECTORY
    )
    tasks = artifact("tasks", "train", synthetic_tasks["train"], schemas.TASK)
    config = CurateConfig(dedup={"near": False}, filters={"max_repeated_calls": 10})  # type: ignore[arg-type]
    train = TableInput(tasks, "train")
    curated = run_step(curate_step.step(config, TableInput(raw, "trajectories"), train), store).ref
    converted = run_step(
        convert_step.step(ConvertConfig(), TableInput(curated, "trajectories"), train), store
    ).ref
    return {
        "curated": io.read_table(curated, "trajectories").to_pylist(),
        "sft": io.read_table(converted, "sft").to_pylist(),
        "rl": io.read_table(converted, "rl_prompts").to_pylist(),
        "uri": converted.uri,
    }


# -- the code format ------------------------------------------------------------------------------


def test_teacher_trajectories_pass_afms_code_format_and_keep_the_code_that_ran(
    pipeline: dict[str, Any],
) -> None:
    runs = {r["run_id"]: r for r in pipeline["curated"]}
    code_math = [e for e in pipeline["sft"] if e["variant"] == "code_math"]
    families = Counter(e["family"] for e in code_math)
    assert families["math"] >= 6 and families["code"] >= 3, (
        families
    )  # arithmetic and programming both converted
    for example in code_math:
        text = example["messages"][-1]["content"]
        assert afm_code_format_ok(text), text
        assert validate(text, "code_math").ok
        # Before this format, every trajectory fenced its code with ```python: AFM's check rejects that.
        assert not afm_code_format_ok(text.replace("```py\n", "```python\n"))
        segments = [s.content for s in parse(text) if s.tag == "code"]
        ran = [json.loads(s["tool_args"])["code"] for s in runs[example["run_id"]]["steps"]
               if s["role"] == "tool_call" and s["tool_name"] == "code"]  # fmt: skip
        assert [extract_code(s) for s in segments] == [extract_code(r) for r in ran]  # same code, same stdin
        assert all("```python" not in r for r in ran)  # the offline teacher writes AFM's format itself
    assert any("```sh\n" in e["messages"][-1]["content"] for e in code_math)  # stdin blocks occur


# -- afm-sft --------------------------------------------------------------------------------------


def test_afm_sft_export_is_read_by_llama_factory_as_one_user_turn(
    pipeline: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "dataset_info.json").write_text(json.dumps({"mine": {"file_name": "mine.json"}}))
    out = tmp_path / "coa_sft.json"
    result = runner.invoke(app, ["export", pipeline["uri"], str(out), "--format", "afm-sft"])
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text())
    info = json.loads((tmp_path / "dataset_info.json").read_text())
    assert set(info) == {"mine", "coa_sft"} and info["coa_sft"]["file_name"] == "coa_sft.json"
    assert len(records) == len(pipeline["sft"])
    rl_prompts = {r["task_id"]: r for r in pipeline["rl"]}
    for record, example in zip(records, pipeline["sft"], strict=True):
        system, question, content = (m["content"] for m in example["messages"])
        for entry in (info["coa_sft"], {"file_name": "coa_sft.json"}):  # ours, and AFM's file_name-only style
            system_used, user, response = lf_alpaca_turns(entry, record)
            assert system_used is None and user == afm_user_turn(system, question, example["variant"])
            assert system in user and question in user  # the CoA rules are in the turn LF trains on
        assert lf_observations_balanced(response) and parse(response, strict=False) == parse(content)
        assert response.count("</observation>\n\n") == content.count("<observation>")
        prompt = rl_prompts.get(example["task_id"])
        if prompt is not None:  # the SFT user turn is byte for byte the AFM RL prompt of the task
            rl_system, rl_question = (m["content"] for m in prompt["prompt"])
            assert user == afm_user_turn(rl_system, rl_question, prompt["variant"])


# -- afm-rl ---------------------------------------------------------------------------------------


def _export_rl(uri: str, out: Path) -> dict[str, list[dict[str, Any]]]:
    result = runner.invoke(app, ["export", uri, str(out), "--format", "afm-rl"])
    assert result.exit_code == 0, result.output
    files = sorted(out.parent.glob(f"{out.stem}.*.parquet"))
    return {
        f.name.removeprefix(f"{out.stem}.").removesuffix(".parquet"): pq.read_table(f).to_pylist()
        for f in files
    }


def test_afm_rl_export_routes_every_row_and_scores_the_teacher(
    pipeline: dict[str, Any], tmp_path: Path
) -> None:
    groups = _export_rl(pipeline["uri"], tmp_path / "rl.parquet")
    assert set(groups) == {"code_math.afm", "web.batch"}  # math+code (AFM manager) / multihop (batch EM)
    rows = {r["extra_info"]["task_id"]: (r, group.split(".")[1]) for group, rs in groups.items() for r in rs}
    assert len(rows) == len(pipeline["rl"])
    expected = {
        "math": ("math_dapo", "fact-reasoning", "mathverify"),
        "code": ("skywork", "coding", "skywork:stdin"),
        "mhqa": ("hotpotqa", "fact-reasoning", "batch:em"),
    }
    for prompt in pipeline["rl"]:
        row, manager = rows[prompt["task_id"]]
        data_source, ability, path = expected[prompt["family"]]
        assert (row["data_source"], row["ability"], afm_reward_path(row, manager)) == (
            data_source,
            ability,
            path,
        )
        assert row["extra_info"]["index"].startswith(f"{data_source}-")
        assert set(row["extra_info"]["tools_kwargs"]) == (
            {"code"} if manager == "afm" else {"web_search", "crawl_page"}
        )

    fixture_indexes = {r["extra_info"]["index"] for name in ("aime24", "math500", "livecodebench_v5")
                       for r in pq.read_table(_fixtures() / f"{name}.parquet").to_pylist()}  # fmt: skip
    ours = [r["extra_info"]["index"] for r, _ in rows.values()]
    assert len(set(ours)) == len(ours) and not set(ours) & fixture_indexes  # safe to mix with AFM's files

    again = _export_rl(pipeline["uri"], tmp_path / "again" / "rl.parquet")
    assert again == groups  # a rerun writes the same rows, indexes included

    scored: Counter[str] = Counter()
    for example in pipeline["sft"]:  # curated = correct teacher runs: AFM's rewards must agree
        row, manager = rows[example["task_id"]]
        response = example["messages"][-1]["content"]
        assert afm_score(row, manager, response) == 1.0, (example["task_id"], row["reward_model"])
        bad = {"math": "\\boxed{-1}", "code": "```py\nprint(0)\n```", "mhqa": "Nobody Xyzzy"}[
            example["family"]
        ]
        wrong = response[: response.rindex("<answer>")] + f"<answer>\n{bad}\n</answer>\n"
        assert afm_score(row, manager, wrong) == 0.0
        scored[example["family"]] += 1
    assert set(scored) == {"math", "code", "mhqa"}


def test_afm_rl_rows_of_the_real_benchmark_files(tmp_path: Path) -> None:
    fixtures = _fixtures()
    names = ["aime24.parquet", "math500.parquet", "livecodebench_v5.parquet", "nq_500.jsonl",
             "gaia_dev_103.json", "webwalker_main.json"]  # fmt: skip
    for name in names[:3]:  # our re-implemented routing accepts AFM's own files
        own = {afm_reward_path(r, "afm") for r in pq.read_table(fixtures / name).to_pylist()}
        assert own == ({"skywork:lcb_pickle"} if "livecodebench" in name else {"mathverify"})
    imported = import_tasks([TaskSourceConfig(path=str(fixtures / n)) for n in names]).tasks.to_pylist()
    originals = {f"{name.split('.')[0]}:{r['extra_info']['index']}": r for name in names[:2]
                 for r in pq.read_table(fixtures / name).to_pylist()}  # fmt: skip
    variants = {"math": "code_math", "code": "code_math", "mhqa": "mhqa", "web": "web"}
    managers = {"math": "afm", "code": "afm", "mhqa": "batch", "web": "batch"}
    paths: Counter[tuple[str, str, str]] = Counter()
    indexes: set[str] = set()
    for task in imported:
        target = afm_target(
            task["family"], task["source"], task["question"], task["gold_answers"], task["test_cases"]
        )
        row = to_afm_rl_row(
            "SYSTEM", task["question"], target, variant=variants[task["family"]], task_id=task["task_id"]
        )
        paths[(task["source"], row["data_source"], afm_reward_path(row, managers[task["family"]]))] += 1
        indexes.add(row["extra_info"]["index"])
        if task["task_id"] in originals:  # math files: AFM's own data source and ground truth
            original = originals[task["task_id"]]
            assert (row["data_source"], row["ability"]) == (original["data_source"], original["ability"])
            assert row["reward_model"] == original["reward_model"]
    assert len(indexes) == len(imported)
    by_source = {(source, ds, path) for source, ds, path in paths}
    assert ("aime24", "aime24", "mathverify") in by_source and (
        "math500",
        "MATH500",
        "mathverify",
    ) in by_source
    assert ("nq_500", "nq", "batch:em") in by_source and (
        "gaia_dev_103",
        "search",
        "batch:judge",
    ) in by_source
    lcb = {path for source, ds, path in by_source if source == "livecodebench_v5"}
    assert {ds for source, ds, _ in by_source if source == "livecodebench_v5"} == {"skywork_livecodebench_v5"}
    assert lcb == {"skywork:stdin", "skywork:unit_test"}  # stdin tests and functional (assert) tests


def test_functional_tests_run_through_afms_unit_test_path() -> None:
    snippet = "result = Solution().add(2, 3)\nassert result == 5, result\n"
    tests = {
        "kind": "functional",
        "functional": snippet,
        "stdin": None,
        "expected_output": None,
        "fn_name": "add",
    }
    row = to_afm_rl_row("S", "Add.", afm_target("code", "leetcode", "Add.", [], tests), variant="code_math")
    assert afm_reward_path(row, "afm") == "skywork:unit_test"
    good = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b"
    assert afm_score(row, "afm", f"<answer>\n```py\n{good}\n```\n</answer>") == 1.0
    assert afm_score(row, "afm", f"<answer>\n```py\n{good.replace('a + b', 'a - b')}\n```\n</answer>") == 0.0


# -- hf + plain TRL -------------------------------------------------------------------------------


def test_hf_export_trains_in_plain_trl_without_prompt_or_observations(
    pipeline: dict[str, Any], tmp_path: Path
) -> None:
    import datasets
    import pyarrow as pa
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from coa.model import TinyModelConfig, init_model, sft_corpus

    folder = tmp_path / "hf"
    assert runner.invoke(app, ["export", pipeline["uri"], str(folder), "--format", "hf"]).exit_code == 0
    card = (folder / "README.md").read_text()
    assert "assistant_only_loss=True" in card and "observation_spans" in card
    recipe = card.split("```python\n", 1)[1].split("```", 1)[0]
    call = recipe[recipe.index("args = SFTConfig(") : recipe.index("\n)\n") + 2]
    scope: dict[str, Any] = {"SFTConfig": SFTConfig}
    exec(call.replace("FOLDER", str(folder)), scope)  # the card's recipe as a user runs it, on this CPU
    assert scope["args"].assistant_only_loss and not scope["args"].bf16
    # A private cache: datasets 5.2 keys its cache of a local folder by the folder's name and config,
    # not its path, so another "hf" folder exported earlier would be served instead of this one.
    ds = datasets.load_dataset(str(folder), "sft", split="train", cache_dir=str(tmp_path / "cache"))
    assert isinstance(ds, datasets.Dataset)
    assert ds.num_rows == len(pipeline["sft"])

    tiny = TinyModelConfig(vocab_size=700, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                           intermediate_size=64)  # fmt: skip
    model_dir = init_model(sft_corpus(pa.Table.from_pylist(pipeline["sft"])), tiny, tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    args = SFTConfig(
        output_dir=str(tmp_path / "out"), assistant_only_loss=True,
        chat_template_path=str(folder / "chat_template.jinja"),
        max_length=None, max_steps=2, per_device_train_batch_size=4, report_to=[], use_cpu=True,
        save_strategy="no", logging_steps=1,
    )  # fmt: skip
    from transformers import AutoModelForCausalLM

    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        args=args,
        train_dataset=ds,
        processing_class=tokenizer,
    )
    reference = AutoTokenizer.from_pretrained(model_dir)  # the student's own template: what our SFT trains
    by_text = {}
    for example in pipeline["sft"]:
        system, question, content = (m["content"] for m in example["messages"])
        full, start = chat_text(reference, system, question, content)
        by_text[full] = (full, start, content)
    prepared = trainer.train_dataset
    assert isinstance(prepared, datasets.Dataset) and prepared.num_rows == len(pipeline["sft"])
    for item in prepared:
        ids, labels = item["input_ids"], item["labels"]
        full, start, content = by_text[str(tokenizer.decode(ids))]
        masked = [t for t, label in zip(ids, labels, strict=True) if label == IGNORE_INDEX]
        untrained = str(tokenizer.decode(masked))
        observations = "".join(content[a:b] for a, b in observation_spans(content))
        assert untrained == full[:start] + observations  # exactly the prompt and the tool output
        assert label_chat(reference, full, start) == (ids, labels)  # = the pipeline's own SFT labels
        assert str(tokenizer.decode([t for t in labels if t != IGNORE_INDEX])).endswith("<|im_end|>\n")
    assert any(observation_spans(c) for _, _, c in by_text.values())
    result = trainer.train()
    assert result.global_step == 2 and result.training_loss == result.training_loss  # ran, loss not NaN


# -- AFM's MHQA agent ---------------------------------------------------------------------------

MHQA_TAGS = {"think", "plan", "wiki_search", "observation", "reflection", "answer"}
"""The functions of AFM's MHQA_PROMPT (afm-spec §1.3): its agent rejects any other tag."""


def test_mhqa_grammar_export_gives_afms_mhqa_agent_its_tags(pipeline: dict[str, Any], tmp_path: Path) -> None:
    from coa.format import system_prompt

    multihop = [e for e in pipeline["sft"] if e["family"] == "mhqa"]
    assert multihop and all(e["variant"] == "web" for e in multihop)
    plain = tmp_path / "plain.json"
    assert runner.invoke(app, ["export", pipeline["uri"], str(plain), "--format", "afm-sft"]).exit_code == 0
    plain_mhqa = [r for r in json.loads(plain.read_text()) if "<web_search>" in r["output"]]
    assert plain_mhqa and not any(
        {s.tag for s in parse(r["output"], strict=False)} <= MHQA_TAGS for r in plain_mhqa
    )

    out = tmp_path / "mhqa.json"
    result = runner.invoke(
        app, ["export", pipeline["uri"], str(out), "--format", "afm-sft", "--grammar", "mhqa"]
    )
    assert result.exit_code == 0, result.output
    records = json.loads(out.read_text())
    mhqa_system = system_prompt("mhqa")[0]
    converted = [r for r in records if r["instruction"] == mhqa_system.strip()]
    left_out = sum(int(n) for n in re.findall(r"(\d+) x ", result.output))
    assert converted and len(converted) + left_out == len(multihop)
    assert len(records) == len(pipeline["sft"]) - left_out  # the other families are exported as before
    for record in converted:
        segments = parse(record["output"], strict=False)
        assert {s.tag for s in segments} <= MHQA_TAGS and "wiki_search" in {s.tag for s in segments}
        assert validate(record["output"].replace("</observation>\n\n", "</observation>\n"), "mhqa").ok
        system_used, user, response = lf_alpaca_turns({"file_name": "mhqa.json"}, record)
        assert (
            system_used is None
            and user.startswith(mhqa_system.strip())
            and lf_observations_balanced(response)
        )
    queries = {
        s.content for r in plain_mhqa for s in parse(r["output"], strict=False) if s.tag == "web_search"
    }
    assert {
        s.content for r in converted for s in parse(r["output"], strict=False) if s.tag == "wiki_search"
    } <= queries

    rl = tmp_path / "rl.parquet"
    result = runner.invoke(
        app, ["export", pipeline["uri"], str(rl), "--format", "afm-rl", "--grammar", "mhqa"]
    )
    assert result.exit_code == 0, result.output
    groups = {f.name.split(".", 1)[1].removesuffix(".parquet"): pq.read_table(f).to_pylist()
              for f in tmp_path.glob("rl.*.parquet")}  # fmt: skip
    assert set(groups) == {"code_math.afm", "mhqa.batch"}
    for row in groups["mhqa.batch"]:
        assert set(row["extra_info"]["tools_kwargs"]) == {"wiki_search"}
        assert row["prompt"][0]["content"].startswith(mhqa_system.strip())
        assert row["reward_model"]["ground_truth"]["target"]  # batch EM reads gt['target']
    refused = runner.invoke(
        app, ["export", pipeline["uri"], str(tmp_path / "x"), "--format", "hf", "--grammar", "mhqa"]
    )
    assert refused.exit_code == 2 and "AFM formats" in refused.output
