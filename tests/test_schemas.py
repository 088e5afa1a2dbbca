"""Data contracts: ids and docs, the one check (lossless casts in, everything else out)."""

import datetime as dt
import json

import pyarrow as pa
import pytest

import schemas
from schemas import QUARANTINE, TASK, TRAJECTORY, ContractError

UTC = dt.UTC


def task_row(**overrides: object) -> dict:
    row = {
        "task_id": "s:0",
        "source": "s",
        "family": "math",
        "question": "1+1?",
        "gold_answers": ["2"],
        "test_cases": None,
        "source_index": 0,
        "metadata": "{}",
    }
    row.update(overrides)
    return row


def test_required_contracts_exist_with_ids_and_docs() -> None:
    assert set(schemas.ALL) >= {
        "task.v1",
        "trajectory.v1",
        "quarantine.v1",
        "sft.v1",
        "rl_prompt.v1",
        "eval.v1",
    }
    for sid, contract in schemas.ALL.items():
        assert contract.schema.metadata[schemas.SCHEMA_ID_KEY].decode() == sid
        for field in contract.schema:
            assert field.metadata and field.metadata[b"doc"].strip(), f"{sid}.{field.name} has no doc"


def test_get_unknown_id_lists_known() -> None:
    with pytest.raises(KeyError, match="known: document.v1, eval.v1"):
        schemas.get("task.v9")


def test_lossless_casts_are_applied() -> None:
    t = TASK.from_rows([task_row()])
    t = t.set_column(t.schema.get_field_index("source_index"), "source_index", pa.array([0], pa.int32()))
    t = t.set_column(t.schema.get_field_index("question"), "question", pa.array(["q"], pa.large_string()))
    out = TASK.conform(t)
    assert out.schema.field("source_index").type == pa.int64()
    assert out.schema.field("question").type == pa.string()
    report = TASK.check(t)
    assert report.ok and {c.column for c in report.columns if c.status == "cast"} == {
        "source_index",
        "question",
    }


@pytest.mark.parametrize(
    ("column", "array", "needle"),
    [
        ("source_index", pa.array(["0"]), "no lossless cast from string to int64"),
        ("source_index", pa.array([0.0]), "no lossless cast from double to int64"),
        ("question", pa.array([1]), "no lossless cast from int64 to string"),
    ],
)
def test_lossy_casts_raise_naming_the_column(column: str, array: pa.Array, needle: str) -> None:
    t = TASK.from_rows([task_row()])
    t = t.set_column(t.schema.get_field_index(column), column, array)
    with pytest.raises(ContractError) as e:
        TASK.conform(t)
    assert e.value.column == column and needle in str(e.value)


def test_integer_narrowing_is_refused() -> None:
    t = QUARANTINE.empty_table()
    ints = pa.table({"x": pa.array([1], pa.int64())})
    assert schemas._contract.lossless_cast_problem(ints.schema.field("x").type, pa.int32())
    assert t.num_rows == 0


def test_missing_extra_null_and_value_errors() -> None:
    t = TASK.from_rows([task_row()])
    with pytest.raises(ContractError, match="'question': missing"):
        TASK.conform(t.drop_columns(["question"]))
    with pytest.raises(ContractError, match="'surprise': unexpected column"):
        TASK.conform(t.append_column("surprise", pa.array([1])))
    with pytest.raises(ContractError, match="'question': nulls: 1 null value"):
        TASK.conform(t.set_column(3, "question", pa.array([None], pa.string())))
    with pytest.raises(ContractError, match="'family': value not allowed: \\['poetry'\\]"):
        TASK.from_rows([task_row(family="poetry")])
    with pytest.raises(ContractError, match="'task_id': duplicate: value 's:0'"):
        TASK.from_rows([task_row(), task_row()])


def test_missing_nullable_column_is_filled() -> None:
    t = TASK.from_rows([task_row()]).drop_columns(["test_cases"])
    out = TASK.conform(t)
    assert out.column("test_cases").null_count == 1


def test_wrong_schema_id_is_reported() -> None:
    t = TASK.from_rows([task_row()])
    with pytest.raises(ContractError, match="declares task.v1, expected quarantine.v1"):
        QUARANTINE.conform(t)


def test_nested_struct_field_mismatch_names_the_field() -> None:
    bad_cases = pa.array([{"kind": "stdin", "stdin": ["1"], "expected_output": ["1"], "timeout": 3}])
    t = TASK.from_rows([task_row(family="code")])
    t = t.set_column(t.schema.get_field_index("test_cases"), "test_cases", bad_cases)
    with pytest.raises(ContractError, match="struct field 'timeout' is not in the contract"):
        TASK.conform(t)


def test_trajectory_holds_a_multi_agent_run() -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
    steps = [
        {"index": 0, "agent": "manager", "role": "plan", "text": "1. search X 2. compute", "started_at": t0},
        {
            "index": 1,
            "agent": "search_agent",
            "role": "think",
            "text": "I should search X",
            "prompt_tokens": 50,
            "completion_tokens": 8,
            "latency_s": 0.4,
            "started_at": t0,
        },
        {
            "index": 2,
            "agent": "search_agent",
            "role": "tool_call",
            "text": "search",
            "tool_name": "web_search",
            "tool_args": json.dumps({"query": "X"}),
            "observation": "X is 3",
            "prompt_tokens": 60,
            "completion_tokens": 5,
            "latency_s": 1.2,
            "started_at": t0,
        },
        {
            "index": 3,
            "agent": "reflector",
            "role": "reflection",
            "text": "good",
            "fields": json.dumps({"information_conflict": "good"}),
            "started_at": t0,
        },
        {
            "index": 4,
            "agent": "code_agent",
            "role": "tool_call",
            "tool_name": "code",
            "tool_args": "{}",
            "error": "SandboxTimeout: exceeded 5 s",
            "started_at": t0,
        },
        {
            "index": 5,
            "agent": "verifier",
            "role": "verification",
            "text": "3",
            "fields": json.dumps({"score": 4}),
            "started_at": t0,
        },
        {"index": 6, "agent": "manager", "role": "final_answer", "text": "3", "started_at": t0},
    ]
    row = {
        "run_id": "r1",
        "task_id": "s:0",
        "family": "web",
        "question": "What is X?",
        "gold_answers": ["3"],
        "teacher": "offline",
        "teacher_config": "{}",
        "sample_index": 0,
        "steps": steps,
        "final_answer": "3",
        "correct": True,
        "status": "completed",
        "error": None,
        "n_steps": 7,
        "n_tool_calls": 2,
        "prompt_tokens": 110,
        "completion_tokens": 13,
        "cost_usd": None,
        "latency_s": 2.0,
        "started_at": t0,
        "finished_at": t0,
    }
    table = TRAJECTORY.from_rows([row])
    back = table.to_pylist()[0]
    assert back["steps"][2]["observation"] == "X is 3"
    assert back["steps"][4]["error"].startswith("SandboxTimeout")
    assert json.loads(back["steps"][5]["fields"]) == {"score": 4}
    assert [s["agent"] for s in back["steps"]][:3] == ["manager", "search_agent", "search_agent"]
    with pytest.raises(ContractError, match="'status'"):
        TRAJECTORY.from_rows([{**row, "status": "exploded"}])
