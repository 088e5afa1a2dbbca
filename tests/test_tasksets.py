"""Task-set import: every AFM benchmark layout, synthetic files of the same layouts, ids, quarantine,
limits, progress and the errors for unreadable inputs."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from coa.tasksets import (
    ImportResult,
    SourceSummary,
    TaskImportError,
    TaskSourceConfig,
    detect_layout,
    import_tasks,
)

MATH_SYSTEM = "Solve the given task step by step"
CODE_SYSTEM = "You are an expert python code programmer"


def run(*sources: TaskSourceConfig | str | Path, **kw: Any) -> ImportResult:
    cfgs = [s if isinstance(s, TaskSourceConfig) else TaskSourceConfig(path=str(s)) for s in sources]
    result = import_tasks(cfgs, **kw)
    schemas.TASK.conform(result.tasks)  # both tables satisfy their contracts
    schemas.QUARANTINE.conform(result.quarantine)
    for s in result.sources:
        assert s.rows_read == s.rows_ok + s.rows_quarantined
    assert set(result.quarantine.column("stage").to_pylist()) <= {"tasks.import"}
    return result


def rows_of(result: ImportResult, source: str | None = None) -> list[dict[str, Any]]:
    return [r for r in result.tasks.to_pylist() if source is None or r["source"] == source]


def meta(row: dict[str, Any]) -> dict[str, Any]:
    value = json.loads(row["metadata"])
    assert isinstance(value, dict)
    return value


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def reasons(result: ImportResult) -> list[str]:
    return list(result.quarantine.column("reason").to_pylist())


def afm_prompt(system: str, problem: str, sep: str = "\n") -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{system}. Use <think> and <answer>.\n\nTask:{sep}{problem}"}]


# -- the real AFM benchmark files ------------------------------------------------------------


def test_gaia(afm_fixtures: Path) -> None:
    raw = json.loads((afm_fixtures / "gaia_dev_103.json").read_text())
    result = run(afm_fixtures / "gaia_dev_103.json")
    rows = rows_of(result)
    assert result.sources == (
        SourceSummary("gaia_dev_103", str(afm_fixtures / "gaia_dev_103.json"), "afm_web/json", 103, 103, 0),
    )
    assert len(rows) == 103 and {r["family"] for r in rows} == {"web"}
    first = rows[0]
    assert first["task_id"] == f"gaia_dev_103:{raw[0]['task_id']}"
    assert first["question"] == raw[0]["question"]
    assert first["gold_answers"] == [raw[0]["answer"]]
    assert first["test_cases"] is None and first["source_index"] == 0
    assert meta(first)["Level"] == raw[0]["Level"]
    assert meta(first)["Annotator_Metadata"] == raw[0]["Annotator_Metadata"]
    assert [r["question"] for r in rows] == [r["question"] for r in raw]


def test_webwalker(afm_fixtures: Path) -> None:
    raw = json.loads((afm_fixtures / "webwalker_main.json").read_text())
    result = run(afm_fixtures / "webwalker_main.json")
    rows = rows_of(result)
    assert len(rows) == 680 and result.sources[0].layout == "afm_web/json"
    assert rows[0]["task_id"] == "webwalker_main:0"  # no native id: the row number
    assert rows[0]["question"] == raw[0]["question"]
    assert rows[0]["gold_answers"] == [raw[0]["answer"]]
    assert meta(rows[0]) == {"root_url": raw[0]["root_url"], "info": raw[0]["info"]}
    assert rows[-1]["task_id"] == "webwalker_main:679"


def test_nq(afm_fixtures: Path) -> None:
    lines = (afm_fixtures / "nq_500.jsonl").read_text().splitlines()
    raw = [json.loads(line) for line in lines if line.strip()]
    result = run(afm_fixtures / "nq_500.jsonl")
    rows = rows_of(result)
    assert len(rows) == 500 and result.sources[0].layout == "mhqa/jsonl"
    assert {r["family"] for r in rows} == {"mhqa"}
    assert rows[0]["question"] == raw[0]["question"]
    assert rows[0]["gold_answers"] == raw[0]["answer"]
    multi = next(i for i, r in enumerate(raw) if len(r["answer"]) > 1)
    assert rows[multi]["gold_answers"] == raw[multi]["answer"]
    assert meta(rows[0]) == {"data_source": "nq"}


@pytest.mark.parametrize(("name", "count"), [("aime24", 30), ("math500", 500)])
def test_math_parquet(afm_fixtures: Path, name: str, count: int) -> None:
    raw = pq.read_table(afm_fixtures / f"{name}.parquet").to_pylist()
    result = run(afm_fixtures / f"{name}.parquet")
    rows = rows_of(result)
    assert len(rows) == count and result.sources[0].layout == "afm_rl/parquet"
    assert {r["family"] for r in rows} == {"math"}
    first = rows[0]
    assert first["task_id"] == f"{name}:{raw[0]['extra_info']['index']}"
    assert first["gold_answers"] == [raw[0]["reward_model"]["ground_truth"]]
    content = raw[0]["prompt"][-1]["content"]
    assert first["question"] == content.split("Task:")[-1].strip()
    assert content.endswith(first["question"])
    for r in rows:
        assert MATH_SYSTEM not in r["question"] and "Answer format:" not in r["question"]
        assert not r["question"].startswith(("Task", "\n", " "))
        assert r["test_cases"] is None and len(r["gold_answers"]) == 1
    m = meta(first)
    assert m["data_source"] == raw[0]["data_source"] and m["ability"] == raw[0]["ability"]
    assert m["question_extraction"] == "task_marker"


def test_math500_first_question(afm_fixtures: Path) -> None:
    rows = rows_of(run(afm_fixtures / "math500.parquet"))
    assert rows[0]["question"].startswith("Convert the point $(0,3)$ in rectangular coordinates")
    assert rows[0]["gold_answers"] == ["\\left( 3, \\frac{\\pi}{2} \\right)"]


def test_livecodebench(afm_fixtures: Path) -> None:
    raw = pq.read_table(afm_fixtures / "livecodebench_v5.parquet").to_pylist()
    result = run(afm_fixtures / "livecodebench_v5.parquet")
    rows = rows_of(result)
    assert len(rows) == 167 and {r["family"] for r in rows} == {"code"}
    kinds = [r["test_cases"]["kind"] for r in rows]
    assert kinds.count("stdin") == 105 and kinds.count("functional") == 62
    for r in rows:
        q = r["question"]
        assert CODE_SYSTEM not in q and "Answer format:" not in q
        assert "In you final answer" not in q and "following starter code" not in q
        assert r["gold_answers"] == []
    first, gt = rows[0], json.loads(raw[0]["reward_model"]["ground_truth"])
    assert first["task_id"] == "livecodebench_v5:abc374_c"
    assert first["question"].startswith("As KEYENCE headquarters have more and more workers")
    assert first["question"].endswith(
        "the maximum number of people taking a lunch break at the same time is 89."
    )
    assert (
        first["test_cases"]["stdin"]
        == gt["stdin"]
        == ["5\n2 3 5 10 12\n", "2\n1 1\n", "6\n22 25 26 45 22 31\n"]
    )
    assert first["test_cases"]["expected_output"] == gt["expected_output"]
    assert first["test_cases"]["functional"] is None and first["test_cases"]["starter_code"] is None
    m = meta(first)
    assert (m["platform"], m["difficulty"], m["question_id"]) == ("atcoder", "medium", "abc374_c")
    i = next(i for i, r in enumerate(raw) if "functional" in r["reward_model"]["ground_truth"])
    fn, fn_raw = rows[i], raw[i]
    assert fn["test_cases"]["kind"] == "functional"
    assert fn["test_cases"]["functional"] == json.loads(fn_raw["reward_model"]["ground_truth"])["functional"]
    assert fn["test_cases"]["starter_code"] == fn_raw["extra_info"]["starter_code"]
    assert fn["test_cases"]["fn_name"] == json.loads(fn_raw["extra_info"]["metadata"])["func_name"]
    assert fn["test_cases"]["stdin"] is None


def test_all_fixtures_together(afm_fixtures: Path) -> None:
    files = sorted(afm_fixtures.iterdir())
    result = run(*files)
    assert [s.rows_ok for s in result.sources] == [30, 103, 167, 500, 500, 680]
    assert result.tasks.num_rows == 1980 and result.quarantine.num_rows == 0
    assert len(set(result.tasks.column("task_id").to_pylist())) == 1980
    assert [detect_layout(str(f)) for f in files] == [
        "afm_rl/parquet",
        "afm_web/json",
        "afm_rl/parquet",
        "afm_rl/parquet",
        "mhqa/jsonl",
        "afm_web/json",
    ]


# -- other files of the same layouts --------------------------------------------------------


def test_hle_like_json(tmp_path: Path) -> None:
    hle = [
        {
            "id": "66e8a1",
            "question": "Let $\\Sigma_g$ be a surface. Compute the simplicial volume.",
            "answer": "11520",
            "answer_type": "exactMatch",
            "rationale": "Gromov.",
            "raw_subject": "Mathematics",
            "category": "Math",
        },
        {
            "id": "66e8a2",
            "question": "Which option?\nA. x\nB. y",
            "answer": "B",
            "answer_type": "multipleChoice",
        },
    ]
    path = tmp_path / "hle_test.json"
    path.write_text(json.dumps(hle))
    rows = rows_of(run(path))
    assert [r["task_id"] for r in rows] == ["hle_test:66e8a1", "hle_test:66e8a2"]
    assert rows[0]["family"] == "web" and rows[0]["gold_answers"] == ["11520"]
    assert meta(rows[0]) == {k: v for k, v in hle[0].items() if k not in ("question", "answer")}


def test_browsecomp_like_json(tmp_path: Path) -> None:
    path = tmp_path / "browsecomp.json"
    path.write_text(
        json.dumps([{"question": "An African author…?", "answer": "1988-96", "topic": "Art"}] * 3)
    )
    result = run(path)
    assert result.sources[0].layout == "afm_web/json"
    rows = rows_of(result)
    assert [r["task_id"] for r in rows] == ["browsecomp:0", "browsecomp:1", "browsecomp:2"]
    assert meta(rows[0]) == {"topic": "Art"}


def repr_math_table() -> pa.Table:
    """AFM math RL rows whose prompt / reward_model / extra_info are Python-repr strings."""

    def row(i: int, problem: str, gt: str, *, system: str = MATH_SYSTEM) -> dict[str, Any]:
        return {
            "data_source": "amc23",
            "prompt": repr(afm_prompt(system, problem)),
            "ability": "fact-reasoning",
            "reward_model": repr({"ground_truth": gt, "style": "rule"}),
            "extra_info": repr({"index": str(i), "split": "test", "tools_kwargs": {"code": {"TODO": "x"}}}),
        }

    rows = [row(0, "What is $2+3$?", "5"), row(1, "Find $x$ if $x^2=4$ and $x>0$.", "2.0")]
    rows.append({**row(2, "ignored", "1"), "prompt": repr([{"role": "user", "content": "What is 1+0?"}])})
    rows.append({**row(3, "q", "1"), "reward_model": "{'ground_truth': '7', 'style': "})  # broken repr
    rows.append({**row(4, "q", "1"), "prompt": "[{'role': 'user', 'content': 'oops'"})  # broken repr
    rows.append({**row(5, "q", "1"), "reward_model": repr({"ground_truth": None, "style": "rule"})})
    rows.append({**row(6, "   ", "3")})
    return pa.Table.from_pylist(rows)


def test_math_parquet_with_repr_strings(tmp_path: Path) -> None:
    path = tmp_path / "amc23.parquet"
    pq.write_table(repr_math_table(), path)
    assert detect_layout(str(path)) == "afm_rl/parquet"
    result = run(path)
    rows = rows_of(result)
    assert [(r["task_id"], r["question"], r["gold_answers"]) for r in rows] == [
        ("amc23:0", "What is $2+3$?", ["5"]),
        ("amc23:1", "Find $x$ if $x^2=4$ and $x>0$.", ["2.0"]),
        ("amc23:2", "What is 1+0?", ["1"]),
    ]
    assert {r["family"] for r in rows} == {"math"}
    assert [meta(r)["question_extraction"] for r in rows] == ["task_marker", "task_marker", "full_prompt"]
    assert "tools_kwargs" not in meta(rows[0])
    assert reasons(result) == ["bad_ground_truth", "bad_prompt", "missing_answer", "empty_question"]
    assert result.quarantine.column("row_key").to_pylist() == ["amc23:3", "amc23:4", "amc23:5", "amc23:6"]
    payload = json.loads(result.quarantine.column("payload")[0].as_py())
    assert payload["data_source"] == "amc23" and payload["reward_model"].startswith("{'ground_truth'")
    assert result.sources[0].rows_read == 7 and result.sources[0].rows_quarantined == 4


def test_code_rows_as_json_strings(tmp_path: Path) -> None:
    """Code RL rows with JSON-string columns, a starter-code tail and a ground truth as a nested object."""
    starter = "class Solution:\n    def addTwo(self, a: int) -> int:\n        "
    problem = (
        "Add two to a.\nExample: a = 1 -> 3\n"
        "You will use the following starter code to write the solution to the problem.\n"
        f"```py\n{starter}\n```\n\nAnswer format: The answer should be a complete python code snippet.\n"
    )
    functional = "assert Solution().addTwo(1) == 3"
    rows = [
        {
            "data_source": "lcb",
            "prompt": json.dumps(afm_prompt(CODE_SYSTEM, problem, sep=" ")),
            "ability": "coding",
            "reward_model": json.dumps(
                {"ground_truth": json.dumps({"functional": functional, "question_id": "q1"}), "style": "rule"}
            ),
            "extra_info": json.dumps({"index": "q1", "metadata": json.dumps({"func_name": "addTwo"})}),
        },
        {  # no starter code in extra_info: taken from the prompt; fn_name from the starter code
            "data_source": "lcb",
            "prompt": json.dumps(afm_prompt(CODE_SYSTEM, problem)),
            "ability": "coding",
            "reward_model": json.dumps({"ground_truth": {"functional": functional}, "style": "rule"}),
            "extra_info": json.dumps({"question_id": "q2"}),
        },
        {
            "data_source": "lcb",
            "prompt": json.dumps(
                afm_prompt(CODE_SYSTEM, "Echo.\nIn you final answer code nippet, read stdin.")
            ),
            "ability": "coding",
            "reward_model": json.dumps(
                {"ground_truth": json.dumps({"stdin": ["1\n", "2\n"], "expected_output": ["1\n"]})}
            ),
            "extra_info": json.dumps({"index": "q3"}),
        },
        {
            "data_source": "lcb",
            "prompt": json.dumps(afm_prompt(CODE_SYSTEM, "Echo.")),
            "ability": "coding",
            "reward_model": json.dumps({"ground_truth": '{"stdin": ["1\\n"], "expected_output": '}),
            "extra_info": json.dumps({"index": "q4"}),
        },
    ]
    path = tmp_path / "code.jsonl"
    write_jsonl(path, rows)
    result = run(path)
    assert result.sources[0].layout == "afm_rl/jsonl"
    ok = rows_of(result)
    assert [r["task_id"] for r in ok] == ["code:q1", "code:q2"]
    for r in ok:
        assert r["question"] == "Add two to a.\nExample: a = 1 -> 3"
        assert r["test_cases"]["kind"] == "functional" and r["test_cases"]["fn_name"] == "addTwo"
        assert r["test_cases"]["functional"] == functional
    assert ok[1]["test_cases"]["starter_code"].rstrip() == starter.rstrip()
    assert reasons(result) == ["bad_ground_truth", "bad_ground_truth"]  # 2 stdin vs 1 output; broken JSON
    assert "vs 1 expected" in result.quarantine.column("detail")[0].as_py()


def test_family_in_config_must_match_afm_rl_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    pq.write_table(repr_math_table().slice(0, 2), path)
    result = run(TaskSourceConfig(path=str(path), family="code"))
    assert result.tasks.num_rows == 0 and reasons(result) == ["family_mismatch"] * 2


def test_afm_rl_target_ground_truth_takes_the_config_family(tmp_path: Path) -> None:
    """Web/MHQA RL rows carry {"target": [...]}: no family implied, so the config must name one."""
    rows = [
        {
            "data_source": "hotpotqa",
            "prompt": [
                {"role": "system", "content": "You are a search agent."},
                {"role": "user", "content": "Who?"},
            ],
            "reward_model": {"ground_truth": json.dumps({"target": ["Ada", "Ada L."]}), "style": "rule"},
            "extra_info": {"index": 3},
        }
    ]
    path = tmp_path / "hotpot_rl.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(TaskImportError, match="family"):
        run(path)
    (row,) = rows_of(run(TaskSourceConfig(path=str(path), family="mhqa")))
    assert (row["task_id"], row["family"], row["question"], row["gold_answers"]) == (
        "hotpot_rl:3",
        "mhqa",
        "Who?",
        ["Ada", "Ada L."],
    )
    assert meta(row)["question_extraction"] == "full_prompt"
    assert reasons(run(TaskSourceConfig(path=str(path), family="code"))) == ["family_mismatch"]


def test_plain_chat_prompt_column(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {"prompt": afm_prompt(MATH_SYSTEM, "What is 6*7?"), "answer": "42"},
            {"prompt": [{"role": "assistant", "content": "hi"}], "answer": "1"},
        ],
    )
    result = run(TaskSourceConfig(path=str(path), family="math"))
    assert [r["question"] for r in rows_of(result)] == ["What is 6*7?"]
    assert reasons(result) == ["bad_prompt"]


def test_plain_jsonl_with_family(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "toy.jsonl",
        [
            {"id": "a", "question": "2+2?", "answer": "4", "level": 1},
            {"problem": "ignored: question wins", "question": "3+3?", "answer": ["6", "six"]},
            {"question": "no answer"},
            {"question": "", "answer": "1"},
            {"answer": "1"},
        ],
    )
    result = run(TaskSourceConfig(path=str(path), family="math", name="toy"))
    assert result.sources[0].layout == "plain/jsonl"
    rows = rows_of(result)
    assert [(r["task_id"], r["family"], r["gold_answers"]) for r in rows] == [
        ("toy:a", "math", ["4"]),
        ("toy:1", "math", ["6", "six"]),
    ]
    assert meta(rows[0]) == {"id": "a", "level": 1}
    assert reasons(result) == ["missing_answer", "empty_question", "missing_question"]


def test_plain_without_family_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "toy.jsonl", [{"question": "2+2?", "answer": "4"}])
    with pytest.raises(TaskImportError, match="family") as err:
        run(path)
    assert str(path) in str(err.value)


def test_plain_parquet_problem_column_and_family_column(tmp_path: Path) -> None:
    path = tmp_path / "mixed.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"problem": "2+2?", "answer": "4", "family": "math"},
                {"problem": "capital of France?", "answer": "Paris", "family": "mhqa"},
                {"problem": "x?", "answer": "y", "family": "poetry"},
            ]
        ),
        path,
    )
    result = run(path)
    assert [(r["family"], r["question"]) for r in rows_of(result)] == [
        ("math", "2+2?"),
        ("mhqa", "capital of France?"),
    ]
    assert reasons(result) == ["bad_family"]


def test_plain_code_rows_need_test_cases(tmp_path: Path) -> None:
    tests = {"kind": "stdin", "stdin": ["1\n"], "expected_output": ["2\n"]}
    path = write_jsonl(
        tmp_path / "code.jsonl",
        [
            {"question": "Print n+1.", "answer": "", "test_cases": tests},
            {"question": "Print n+2.", "answer": ""},
        ],
    )
    result = run(TaskSourceConfig(path=str(path), family="code"))
    (row,) = rows_of(result)
    assert row["test_cases"]["stdin"] == ["1\n"] and row["gold_answers"] == []
    assert reasons(result) == ["missing_tests"]


def test_json_file_holding_json_lines(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "export.json", [{"question": "q1", "answer": "a"}, {"question": "q2", "answer": "b"}]
    )
    result = run(TaskSourceConfig(path=str(path), family="mhqa"))
    assert result.sources[0].layout == "plain/jsonl" and result.tasks.num_rows == 2


# -- Hugging Face datasets folders -----------------------------------------------------------


def test_datasets_folder(afm_fixtures: Path, tmp_path: Path) -> None:
    import datasets

    datasets.disable_progress_bars()
    raw = pq.read_table(afm_fixtures / "aime24.parquet").to_pylist()
    datasets.Dataset.from_list(raw[:5]).save_to_disk(str(tmp_path / "aime_hf"))
    result = run(tmp_path / "aime_hf")
    assert result.sources[0].layout == "afm_rl/hf_dataset"
    rows = rows_of(result)
    assert [r["task_id"] for r in rows] == [f"aime_hf:{i}" for i in range(5)]
    assert rows[0]["gold_answers"] == ["204"] and rows[0]["question"].startswith("Every morning Aya")

    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(
                [{"question": f"t{i}", "answer": [f"a{i}"], "data_source": "hq"} for i in range(3)]
            ),
            "test": datasets.Dataset.from_list([{"question": "s0", "answer": ["b"], "data_source": "hq"}]),
        }
    )
    dd.save_to_disk(str(tmp_path / "hotpot"))
    result = run(tmp_path / "hotpot")
    assert result.sources[0].layout == "mhqa/hf_dataset"
    rows = rows_of(result)
    assert [r["task_id"] for r in rows] == [
        "hotpot:train/0",
        "hotpot:train/1",
        "hotpot:train/2",
        "hotpot:test/3",
    ]
    assert [meta(r)["hf_split"] for r in rows] == ["train"] * 3 + ["test"]
    assert [r["source_index"] for r in rows] == [0, 1, 2, 3] and rows[3]["gold_answers"] == ["b"]


def test_plain_datasets_folder_needs_family(tmp_path: Path) -> None:
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_list([{"question": "2+2?", "answer": "4"}]).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(TaskImportError, match="family"):
        run(tmp_path / "ds")
    result = run(TaskSourceConfig(path=str(tmp_path / "ds"), family="math"))
    assert rows_of(result)[0]["task_id"] == "ds:0"


# -- ids -------------------------------------------------------------------------------------


def test_ids_unique_across_sources_with_the_same_stem(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        write_jsonl(tmp_path / d / "qa.jsonl", [{"question": f"{d}{i}?", "answer": ["x"]} for i in range(3)])
    result = run(tmp_path / "a" / "qa.jsonl", tmp_path / "b" / "qa.jsonl", tmp_path / "a" / "qa.jsonl")
    assert [s.name for s in result.sources] == ["qa", "qa-2", "qa-3"]
    ids = result.tasks.column("task_id").to_pylist()
    assert len(ids) == len(set(ids)) == 9
    assert ids[:4] == ["qa:0", "qa:1", "qa:2", "qa-2:0"]
    assert {r["source"] for r in rows_of(result)} == {"qa", "qa-2", "qa-3"}


def test_explicit_names_and_duplicate_native_ids(tmp_path: Path) -> None:
    path = tmp_path / "web.json"
    path.write_text(
        json.dumps(
            [
                {"id": 7, "question": "first", "answer": "a"},
                {"id": 7, "question": "second", "answer": "b"},
                {"id": 8, "question": "third", "answer": "c"},
            ]
        )
    )
    result = run(TaskSourceConfig(path=str(path), name="gaia"))
    assert [r["task_id"] for r in rows_of(result)] == ["gaia:7", "gaia:8"]
    assert reasons(result) == ["duplicate_id"]
    assert result.quarantine.column("row_key").to_pylist() == ["gaia:7"]
    assert json.loads(result.quarantine.column("payload")[0].as_py())["question"] == "second"


# -- quarantine, limits, progress ------------------------------------------------------------


def test_bad_lines_are_quarantined_with_the_raw_text(tmp_path: Path) -> None:
    path = tmp_path / "nq.jsonl"
    path.write_text(
        '{"question": "q0", "answer": ["a"]}\n'
        "{not json\n"
        "\n"
        "[1, 2]\n"
        '{"question": "q3", "answer": []}\n'
        '{"question": 5, "answer": ["a"]}\n'
        '{"question": "lone \\ud800 surrogate", "answer": ["a"]}\n'
    )
    result = run(path)
    s = result.sources[0]
    assert (s.layout, s.rows_read, s.rows_ok, s.rows_quarantined) == ("mhqa/jsonl", 6, 1, 5)
    assert reasons(result) == ["bad_row", "bad_row", "missing_answer", "missing_question", "bad_text"]
    assert result.quarantine.column("payload").to_pylist()[:2] == ["{not json", "[1, 2]"]
    assert result.quarantine.column("source").to_pylist() == [str(path)] * 5
    assert "\\ud800" in result.quarantine.column("payload")[4].as_py()
    assert all(d.startswith("row ") for d in result.quarantine.column("detail").to_pylist())


def test_limit_keeps_the_first_usable_rows(afm_fixtures: Path, tmp_path: Path) -> None:
    result = run(TaskSourceConfig(path=str(afm_fixtures / "nq_500.jsonl"), limit=10))
    assert result.tasks.num_rows == 10
    assert result.sources[0].rows_read == 10 and result.sources[0].rows_skipped_by_limit == 490

    path = write_jsonl(
        tmp_path / "x.jsonl", [{"question": "", "answer": ["a"]}] + [{"question": "q", "answer": ["a"]}] * 5
    )
    result = run(TaskSourceConfig(path=str(path), limit=2))
    s = result.sources[0]
    assert (s.rows_read, s.rows_ok, s.rows_quarantined, s.rows_skipped_by_limit) == (3, 2, 1, 3)


def test_progress_reports(afm_fixtures: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    run(
        afm_fixtures / "math500.parquet", afm_fixtures / "aime24.parquet", progress=lambda *a: calls.append(a)
    )
    math = [c for c in calls if c[0] == "math500"]
    assert math[0] == ("math500", 0, 500) and math[-1] == ("math500", 500, 500) and len(math) > 10
    assert [c[1] for c in math] == sorted(c[1] for c in math)
    assert [c for c in calls if c[0] == "aime24"][-1] == ("aime24", 30, 30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "question": st.one_of(st.none(), st.integers(), st.text(max_size=5)),
                    "answer": st.one_of(
                        st.none(), st.text(max_size=3), st.lists(st.text(max_size=3), max_size=2)
                    ),
                    "id": st.one_of(st.none(), st.sampled_from(["a", "b", "c"]), st.integers(0, 3)),
                },
            ),
            st.integers(),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_no_row_is_lost(rows: list[Any]) -> None:
    rows = [{"question": "anchor", "answer": "x"}, *rows]  # the layout needs its columns somewhere
    with tempfile.TemporaryDirectory() as d:
        path = write_jsonl(Path(d) / "p.jsonl", rows)
        result = run(TaskSourceConfig(path=str(path), family="math"))
    s = result.sources[0]
    assert s.rows_read == len(rows) == result.tasks.num_rows + result.quarantine.num_rows
    for r in rows_of(result):
        assert r["question"].strip() and r["gold_answers"]


# -- unreadable inputs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.jsonl", None, "not found"),
        ("broken.json", b'[{"question": "q", "answer": ', "not valid JSON"),
        ("broken.parquet", b"PAR1 this is not parquet", "not a readable Parquet file"),
        ("empty.jsonl", b"", "empty"),
        ("empty.json", b"  \n", "empty"),
        ("empty_list.json", b"[]", "no rows"),
        ("object.json", b'{"data": [{"question": "q", "answer": "a"}]}', "not a list"),
        ("numbers.json", b"[1, 2, 3]", "no objects"),
        ("garbage.jsonl", b"hello\nworld\n", "no line is a JSON object"),
        ("unknown.jsonl", b'{"foo": 1}\n', "unknown layout"),
        ("table.csv", b"question,answer\nq,a\n", "unsupported file type"),
    ],
)
def test_unreadable_inputs(tmp_path: Path, name: str, content: bytes | None, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(TaskImportError, match=message) as err:
        run(TaskSourceConfig(path=str(path), family="math"))
    assert str(path) in str(err.value)
    with pytest.raises(TaskImportError):
        detect_layout(str(path))


def test_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("hi")
    with pytest.raises(TaskImportError, match="save_to_disk") as err:
        run(tmp_path / "data")
    assert str(tmp_path / "data") in str(err.value)


def test_nothing_is_returned_when_one_source_fails(afm_fixtures: Path, tmp_path: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    with pytest.raises(TaskImportError, match="bad.json"):
        import_tasks(
            [
                TaskSourceConfig(path=str(afm_fixtures / "aime24.parquet")),
                TaskSourceConfig(path=str(tmp_path / "bad.json")),
            ],
            progress=lambda *a: calls.append(a),
        )
    assert calls  # the first source was read, yet no result came back
