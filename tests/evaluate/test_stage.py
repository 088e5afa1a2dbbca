"""Evaluation with real generators: the tiny random model in process, a completions endpoint, the artifact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coa.evaluate import EndpointGenerator, EvalConfig, HFGenerator, evaluate_tasks
from coa.evaluate.generation import STOP_TAGS
from coa.llm.config import EndpointConfig
from coa.model import TinyModelConfig, init_model, sft_corpus
from coa.tools.config import ToolsConfig, build_toolbox
from tests.llm.fake_server import FakeLLMServer, Reply
from tests.train.rows import arith_rows

from .test_inference import PLAN, SpyToolBox, task, tasks_table

TINY = TinyModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(sft_corpus(arith_rows(200, seed=0)), TINY, tmp_path_factory.mktemp("tiny") / "model")


def test_random_tiny_model_runs_end_to_end_within_its_limits(tiny_model: Path) -> None:
    generator = HFGenerator(str(tiny_model))
    assert generator.single_token_stops  # every CoA tag is one token of the tiny vocabulary
    config = EvalConfig(
        max_turns=3, max_new_tokens=24, max_total_tokens=40, batch_size=2, prompt_style="brief"
    )
    tasks = tasks_table(task(0, "What is 12 + 30?"), task(1, "What is 50 - 8?"), task(2, "What is 6 * 7?"))
    table = evaluate_tasks(tasks, generator, SpyToolBox(), config)
    assert table.num_rows == 3
    for row in table.to_pylist():
        assert 1 <= row["n_turns"] <= 3 and 0 < row["completion_tokens"] <= 40
        assert (
            row["prompt_tokens"]
            == generator.count_tokens(generator.chat_prompt("x", "y"))
            - 2
            + len(generator.tokenizer(row["text"][:0] + "", add_special_tokens=False).input_ids)
            or row["prompt_tokens"] > 0
        )
        assert row["error"] is not None or row["text"].endswith(tuple(f"{t}\n" for t in STOP_TAGS))


def test_hf_generation_stops_at_a_tag_token(tiny_model: Path) -> None:
    generator = HFGenerator(str(tiny_model))
    tag = generator.tokenizer.convert_tokens_to_ids("</code>")
    completion = generator._completion([5, 6, tag, 7, 8], limit=10)
    assert completion.reason == "stop" and completion.stop == "</code>" and completion.n_tokens == 3
    assert completion.text.endswith("</code>")
    eos = generator.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ended = generator._completion([5, eos, 6], limit=10)
    assert (ended.reason, ended.n_tokens) == ("eos", 2) and "<|im_end|>" not in ended.text
    assert generator._completion([5, 6, 7, 8], limit=3).reason == "length"


@pytest.fixture()
def completions_server() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer()
    server.app.add_api_route("/v1/completions", server._handle, methods=["POST"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _completion_body(text: str, finish: str, stop_reason: str | None, tokens: int) -> dict[str, object]:
    return {
        "id": "cmpl", "object": "text_completion", "model": "student",
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "stop_reason": stop_reason}],
        "usage": {"prompt_tokens": 30, "completion_tokens": tokens, "total_tokens": 30 + tokens},
    }  # fmt: skip


def test_endpoint_generator_against_a_completions_server(completions_server: FakeLLMServer) -> None:
    after = "<reflection>\nok\n</reflection>\n<think>\nAnswer.\n</think>\n<answer>\n\\boxed{42}\n</answer>"
    completions_server.push(
        Reply(body=_completion_body(PLAN.removesuffix("</code>"), "stop", "</code>", 12)),
        Reply(body=_completion_body(after.removesuffix("</answer>"), "stop", "</answer>", 9)),
    )
    endpoint = EndpointConfig(name="vllm", base_url=completions_server.url, model="student", max_retries=0)
    generator = EndpointGenerator(endpoint)
    box = SpyToolBox(build_toolbox(ToolsConfig(enabled=("code",), record="off"), None))
    row = evaluate_tasks(
        tasks_table(task(0, "What is 6 * 7?")), generator, box, EvalConfig(prompt_style="brief")
    )
    generator.close()
    result = row.to_pylist()[0]
    assert (result["correct"], result["format_valid"], result["completion_tokens"]) == (True, True, 21)
    first, second = (r.body for r in completions_server.requests)
    assert first["model"] == "student" and set(first["stop"]) == set(STOP_TAGS)
    assert first["prompt"].startswith("<|im_start|>system\n") and first["prompt"].endswith(
        "<|im_start|>assistant\n"
    )
    assert second["prompt"].startswith(first["prompt"]) and "<observation>\n[EXECUTED]" in second["prompt"]


def test_unreachable_endpoint_names_the_url() -> None:
    endpoint = EndpointConfig(
        name="down", base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, timeout_s=2
    )
    generator = EndpointGenerator(endpoint)
    with pytest.raises(RuntimeError, match=r"http://127.0.0.1:9/v1/completions unreachable"):
        generator.generate(["hi"], [4])
    generator.close()
