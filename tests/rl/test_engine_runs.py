"""Every RL run after the first behaves like the first, against ``coa.serve`` in each engine's mode:
runs in a row on one server, a killed run resumed on the same server, a run resumed after the
server restarted (its adapters and versions gone). coa.serve does what the engine does in each case:
SGLang serves a pushed folder under its path, vLLM answers 404 for an adapter it does not hold, a
killed run's adapters stay loaded (the kill here skips the run's clean-up, as SIGKILL would).

A server start costs more than a run here (torch imported by each): each test runs its cases one
after another on one server, where the state a finished run leaves is a fresh server's (a LoRA run
leaves the base weights, name and version as they were; a resumed run unloads what it loaded)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from coa.kit.run import CHECKPOINTS_DIR
from coa.rl.config import RLResult
from coa.rl.grpo import run_rl
from coa.rl.server import WeightSync
from coa.tools.config import ToolsConfig
from tests.serve.conftest import ServeProcess
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse fixture)

from .helpers import prompts_table
from .test_grpo import _Kill
from .test_lora import LORA, served_logprobs, spy_bodies, with_adapter
from .test_server_backend import FIXED, close, logprobs_of, server_config

PLAN = 2
CASES = {
    # case: (coa.serve's protocol, the adapter rl.rollout.server.engine names, rl.lora)
    "sglang": ("sglang", "sglang", None),  # full weights through /update_weights_from_disk
    "vllm-lora": ("vllm", "vllm", LORA),  # one adapter per version
    "sglang-lora": ("sglang", "sglang", LORA),  # SGLang's /load_lora_adapter, one name per version
}


def start(tiny_model: Path, protocol: str) -> ServeProcess:
    extra = ("--protocol", "sglang") if protocol == "sglang" else ()
    server = ServeProcess(tiny_model, "--served-model-name", "student", *extra, dev_mode=protocol == "vllm")
    server.wait_ready()
    return server


@pytest.fixture
def servers(tiny_model: Path) -> Iterator[list[ServeProcess]]:
    """The servers a test starts (a restart starts another); each stopped at the end."""
    started: list[ServeProcess] = []
    yield started
    for server in started:
        server.stop()


def config(tiny_model: Path, server: ServeProcess, case: str, **kw: Any) -> Any:
    _, engine, lora = CASES[case]
    extra = {"lora": lora} if lora else {}
    return server_config(
        tiny_model,
        server,
        engine,
        max_steps=PLAN,
        tools=ToolsConfig(enabled=(), record="off"),
        **extra,
        **kw,
    )


def killed_after_checkpoint_1(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run dies right after checkpoint 1, its clean-up skipped (adapters and folders left behind)."""
    with monkeypatch.context() as patched:
        patched.setattr(WeightSync, "clean", lambda self: None)
        with pytest.raises(KeyboardInterrupt):
            run(callbacks=[_Kill(1)])


def assert_finished(result: RLResult, start_step: int = 0) -> None:
    """The plan's steps, every row sampled with the weights pushed at its step (sync: version == step)."""
    assert (result.start_step, result.global_step, result.steps_run) == (start_step, PLAN, PLAN - start_step)
    assert result.rollout_stats["weight_version_mismatches"] == 0  # SGLang's reports agree with the stamps
    rows = pq.read_table(result.rollouts_file).to_pylist()
    assert {r["step"] for r in rows if r["step"] >= start_step} == set(range(start_step, PLAN))
    assert rows and all(r["policy_version"] == r["step"] for r in rows)
    assert not any(r["old_kv"] for r in rows)  # sync: no push lands while a generation runs


def served_ids(server: ServeProcess) -> list[str]:
    return [m["id"] for m in httpx.get(f"{server.url}/models", timeout=30).json()["data"]]


def version_route(protocol: str) -> str:
    return "/model_info" if protocol == "sglang" else "/weight_info"


def a_lora_run_on_sglang(
    server: ServeProcess, tiny_model: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rl.lora`` against SGLang: each version's adapter loaded by SGLang's ``/load_lora_adapter``
    under its own name, every request naming it as ``student:<adapter>`` (SGLang's ``model``
    syntax), the adapter served as version V the trainer's weights at step V; the run unloads its
    adapters at its end."""
    from transformers import TrainerCallback

    served: dict[int, list[float]] = {}

    class Probe(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            version = state.global_step - 1
            served[version] = served_logprobs(server, f"student:student-v{version}", FIXED)

    with monkeypatch.context() as patched:
        sent = spy_bodies(patched)
        result = run_rl(prompts_table(6), config(tiny_model, server, "sglang-lora"), out, callbacks=[Probe()])
    assert_finished(result)
    assert sent and all(model == f"student:student-v{version}" for model, version in sent)
    step1 = logprobs_of(with_adapter(tiny_model, out / CHECKPOINTS_DIR / "checkpoint-1"), FIXED)
    assert sorted(served) == [0, 1] and close(served[1], step1) and not close(served[0], served[1])
    assert served_ids(server) == ["student"]  # unloaded; SGLang still serves the base by its name
    # as a fresh server: the base's weights (LoRA pushes leave them), name and version
    assert httpx.get(f"{server.root}/model_info").json()["weight_version"] == "default"


def test_runs_in_a_row_on_one_sglang_server(
    servers: list[ServeProcess], tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LoRA run, then two full-weight runs in a row, on one SGLang server."""
    server = start(tiny_model, "sglang")
    servers.append(server)
    a_lora_run_on_sglang(server, tiny_model, tmp_path / "lora", monkeypatch)
    for run in ("first", "second"):
        assert_finished(run_rl(prompts_table(6), config(tiny_model, server, "sglang"), tmp_path / run))
    # SGLang serves the second run's last folder by its path, as it served the first's when that ran
    assert served_ids(server) == [str((tmp_path / "second" / "weight_sync" / f"v{PLAN - 1:06d}").resolve())]


@pytest.mark.slow  # four runs and two servers each
@pytest.mark.parametrize("case", ["sglang", "vllm-lora"])
def test_a_killed_run_resumes_on_the_same_server_and_after_the_server_restarted(
    case: str,
    servers: list[ServeProcess],
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A killed run resumed on the same server; then another killed run, the engine restarted between
    the kill and the resume: it holds no adapter and its version is ``default``; the run's folders on
    disk name versions it does not hold (unloading them would be vLLM's 404): the resumed run
    finishes its plan on the new server."""
    protocol = CASES[case][0]
    first = start(tiny_model, protocol)
    servers.append(first)

    # a killed run resumes on the same server
    out, settings = tmp_path / "same", config(tiny_model, first, case)
    killed_after_checkpoint_1(lambda **kw: run_rl(prompts_table(6), settings, out, **kw), monkeypatch)
    if case == "vllm-lora":
        assert served_ids(first) == ["student", "student-v0"]  # the killed run's adapter stays loaded
    else:  # SGLang serves the killed run's folder
        assert served_ids(first) == [str((out / "weight_sync" / "v000000").resolve())]
    assert_finished(run_rl(prompts_table(6), settings, out, resume=True), start_step=1)
    if case == "vllm-lora":  # the leftover was replaced, then unloaded with the run's own
        assert served_ids(first) == ["student"]

    # a killed run resumes after the server restarted
    out = tmp_path / "restarted"
    killed_after_checkpoint_1(lambda **kw: run_rl(prompts_table(6), settings, out, **kw), monkeypatch)
    assert list((out / "weight_sync").glob("v*"))  # the killed run's folders
    first.stop()
    second = start(tiny_model, protocol)
    servers.append(second)
    assert httpx.get(f"{second.root}{version_route(protocol)}").json()["weight_version"] == "default"
    resumed = run_rl(prompts_table(6), config(tiny_model, second, case), out, resume=True)
    assert_finished(resumed, start_step=1)
    expected = "default" if case == "vllm-lora" else str(PLAN - 1)  # LoRA pushes leave the base's version
    assert httpx.get(f"{second.root}{version_route(protocol)}").json()["weight_version"] == expected
    assert not list((out / "weight_sync").glob("v*"))  # the resumed run removed every folder
