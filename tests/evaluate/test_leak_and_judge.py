"""The evaluation's leak guard (blocked benchmark hosts, the gold answer flagged in an observation)
and an evaluation whose web answers are judged, repeated: the second replays every verdict."""

from __future__ import annotations

import json
from pathlib import Path

from coa.evaluate.config import DEFAULT_BLOCKED_HOSTS, EvalConfig
from coa.evaluate.leak import gold_in_observations
from coa.evaluate.stage import evaluate_tasks
from coa.llm import EndpointConfig, LLMConfig
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from coa.scoring.judge import LLMJudge
from coa.tools.crawl import crawl_pages
from coa.tools.search import BlockingSearch, SearchHit, blocked_url, web_search
from coa.tools.toolbox import ToolResult
from tests.llm.fake_server import FakeLLMServer, Reply, completion
from tests.rollout.helpers import blocks

from .test_inference import LIMITS, codec, task, tasks_table, tiny_model  # noqa: F401 (fixtures)


def test_blocked_url_matches_hosts_subdomains_and_path_prefixes() -> None:
    hosts = DEFAULT_BLOCKED_HOSTS
    assert blocked_url("https://huggingface.co/datasets/HuggingFaceH4/aime_2024", hosts)
    assert blocked_url("http://www.HuggingFace.co/datasets", hosts)
    assert blocked_url("github.com/openai/simple-evals/blob/main/browsecomp_eval.py", hosts)
    assert blocked_url("https://artofproblemsolving.com/wiki/index.php/2024_AIME_I", hosts)
    assert not blocked_url("https://huggingface.co/Qwen/Qwen2.5-7B", hosts)  # a model page, not a dataset
    assert not blocked_url("https://github.com/openai/simple-evals-fork", hosts)  # prefix on a path part only
    assert not blocked_url("https://en.wikipedia.org/wiki/AIME", hosts)
    assert not blocked_url("local://doc/e1", hosts) and not blocked_url(
        "https://huggingface.co/datasets/x", ()
    )


class FixedSearch:
    def __init__(self, hits: list[SearchHit]) -> None:
        self.hits = hits

    def search(self, query: str, top_k: int = 10) -> list[SearchHit]:
        return self.hits[:top_k]


def test_search_hits_and_crawls_at_benchmark_hosts_are_blocked() -> None:
    hits = [
        SearchHit("AIME 2024 dataset", "https://huggingface.co/datasets/maxwell/aime24", "answer: 204"),
        SearchHit("Number theory", "https://en.wikipedia.org/wiki/Number_theory", "numbers"),
        SearchHit("GAIA", "https://huggingface.co/gaia-benchmark/GAIA", "validation answers"),
    ]
    guarded = BlockingSearch(FixedSearch(hits), DEFAULT_BLOCKED_HOSTS)
    text = web_search(guarded, "aime 2024 answers")
    assert "wikipedia" in text and "huggingface" not in text and "204" not in text
    assert guarded.blocked == 2
    page = crawl_pages("https://huggingface.co/datasets/maxwell/aime24", blocked=DEFAULT_BLOCKED_HOSTS)
    assert "blocked during evaluation" in page


def test_gold_in_a_search_observation_is_flagged_but_not_in_code_output() -> None:
    search = (
        blocks(("web_search", "aime 2024 problem 1"))
        + "\n<observation>\nThe answer is 204.\n</observation>\n"
    )
    code = blocks(("code", "print(204)")) + "\n<observation>\n204\n</observation>\n"
    assert gold_in_observations(search, ["204"])
    assert not gold_in_observations(code, ["204"])
    assert not gold_in_observations(search, ["2040"])  # whole words only


class LeakyToolBox:
    """web_search answers with the gold answer (as a benchmark dump would); code prints it."""

    tools = ("web_search", "code")

    async def call(self, name: str, argument: str) -> ToolResult:
        return ToolResult("Paris (from the benchmark's answer key)" if name == "web_search" else "Paris")


def test_a_run_that_read_the_answer_is_flagged_and_counted(codec: Codec) -> None:  # noqa: F811
    from coa.evaluate.metrics import eval_metrics

    look = blocks(
        ("think", "Look."), ("plan", "Search."), ("think", "Go."), ("web_search", "capital of France")
    )
    answer = blocks(("think", "Found."), ("answer", "Paris"))
    policy = ScriptedPolicy(codec, {"Capital A": [look, answer], "Capital B": [answer]})
    table = evaluate_tasks(
        tasks_table(task(0, "Capital A", "mhqa", "Paris"), task(1, "Capital B", "mhqa", "Paris")),
        policy, LeakyToolBox(), LIMITS,
    )  # fmt: skip
    assert table.column("gold_in_observation").to_pylist() == [True, False]
    assert eval_metrics(table)["all"]["leak_rate"] == 0.5


def test_a_repeated_evaluation_replays_the_judge_from_the_cache(
    codec: Codec,  # noqa: F811
    server: FakeLLMServer,
    tmp_path: Path,
) -> None:
    server.reset()
    for judgement in ("correct", "incorrect"):
        server.push(Reply(body=completion(json.dumps({"rationale": "r", "judgement": judgement}))))
    endpoint = EndpointConfig(name="judge", base_url=server.url, model="judge-model", max_retries=1,
                              backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=5)  # fmt: skip
    llm = LLMConfig(endpoints=(endpoint,), cache_root=str(tmp_path / "llm-cache"))
    replies = {
        f"Web {i}": [blocks(("think", "Known."), ("answer", a))]
        for i, a in enumerate(["W. Roentgen", "Bohr"])
    }
    tasks = tasks_table(
        task(0, "Web 0", "web", "Wilhelm Röntgen"), task(1, "Web 1", "web", "Wilhelm Röntgen")
    )
    config = EvalConfig(max_turns=2, max_new_tokens=64, max_total_tokens=128, prompt_style="brief", judge=llm)

    def run() -> list[tuple[bool, float]]:
        judge = LLMJudge(llm)
        try:
            table = evaluate_tasks(tasks, ScriptedPolicy(codec, replies), None, config, judge=judge)
        finally:
            judge.close()
        return list(zip(table.column("correct").to_pylist(), table.column("score").to_pylist(), strict=True))

    first = run()
    assert server.hits == 2 and sorted(first) == [(False, 0.0), (True, 1.0)]
    assert run() == first and server.hits == 2  # same verdicts, no new request
