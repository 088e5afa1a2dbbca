"""Evaluation with real policies: the tiny random model in process, a completions endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from coa.evaluate.config import EvalConfig
from coa.evaluate.generation import open_policy
from coa.evaluate.stage import evaluate_tasks
from coa.llm.config import EndpointConfig
from coa.model import TinyModelConfig, init_model, sft_corpus
from coa.rollout import STOP_TAGS, Codec
from coa.rollout.policies.hf import HFPolicy
from coa.tools.build import build_toolbox
from coa.tools.config import ToolsConfig
from tests.rollout.fake_completions import FakeCompletionsServer, TurnScript
from tests.train.rows import arith_rows

from .test_inference import PLAN, SpyToolBox, task, tasks_table

TINY = TinyModelConfig(
    vocab_size=512, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(sft_corpus(arith_rows(200, seed=0)), TINY, tmp_path_factory.mktemp("tiny") / "model")


def test_random_tiny_model_runs_end_to_end_within_its_limits(tiny_model: Path) -> None:
    policy = HFPolicy(str(tiny_model), max_batch=2)
    assert policy.codec.single_token_stops  # every CoA tag is one token of the tiny vocabulary
    config = EvalConfig(
        max_turns=3, max_new_tokens=24, max_total_tokens=40, batch_size=2, prompt_style="brief"
    )
    tasks = tasks_table(task(0, "What is 12 + 30?"), task(1, "What is 50 - 8?"), task(2, "What is 6 * 7?"))
    table = evaluate_tasks(tasks, policy, SpyToolBox(), config)
    assert table.num_rows == 3
    for row in table.to_pylist():
        assert 1 <= row["n_turns"] <= 3 and 0 < row["completion_tokens"] <= 40 and row["prompt_tokens"] > 0
        assert "<|im_end|>" not in row["text"]  # an end of turn ends the run, outside the text
        assert (
            row["error"] is not None
            or row["text"].endswith(tuple(f"{t}\n" for t in STOP_TAGS))
            or (
                row["n_turns"] >= 1 and not row["text"].endswith("\n")  # ended its turn mid-block
            )
        )


def test_endpoint_policy_against_a_completions_server(tiny_model: Path) -> None:
    codec = Codec.from_pretrained(str(tiny_model))
    after = "<reflection>\nok\n</reflection>\n<think>\nAnswer.\n</think>\n<answer>\n\\boxed{42}\n</answer>"
    script = TurnScript(
        [codec.encode(PLAN), codec.encode(after)], codec.tokenizer.convert_tokens_to_ids("</observation>")
    )
    box = SpyToolBox(build_toolbox(ToolsConfig(enabled=("code",), record="off"), None))
    with FakeCompletionsServer(script) as server:
        endpoint = EndpointConfig(name="vllm", base_url=server.url, model="student", max_retries=0)
        config = EvalConfig(prompt_style="brief", backend="endpoint", endpoint=endpoint)
        policy = open_policy(config, str(tiny_model))
        row = evaluate_tasks(tasks_table(task(0, "What is 6 * 7?")), policy, box, config).to_pylist()[0]
    tokens = len(codec.encode(PLAN)) + len(codec.encode(after))
    assert (row["correct"], row["format_valid"], row["completion_tokens"]) == (True, True, tokens)
    first, second = server.app.requests
    assert first["model"] == "student" and set(first["stop_token_ids"]) == set(codec.stop_ids)
    assert codec.decode(first["prompt"]).startswith("<|im_start|>system\n")
    assert codec.decode(first["prompt"]).endswith("<|im_start|>assistant\n")
    assert second["prompt"][: len(first["prompt"])] == first["prompt"]
    assert "<observation>\n[EXECUTED]" in codec.decode(second["prompt"])
