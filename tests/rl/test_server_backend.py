"""RL against the project's completions server (``python -m coa.serve`` on 127.0.0.1): the ``server``
backend's weight sync, the rows' policy versions and behaviour logprobs, async mode, a killed
async run resuming; and the ``hf_batched`` backend's greedy episodes against ``hf``'s."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest
import torch
import yaml

import schemas
from coa.kit.run import CHECKPOINTS_DIR
from coa.rl.config import RLRunConfig
from coa.rl.grpo import run_rl
from coa.rollout import Generation, Sampling
from coa.rollout.policies.endpoint import EndpointPolicy
from coa.tools.config import ToolsConfig
from tests.serve.conftest import REPO, ServeProcess
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse fixture)

from .helpers import prompts_table

FIXED = [3, 41, 97, 5, 260, 18, 77, 301, 12, 9, 150, 44]


@pytest.fixture(scope="module")
def sglang_serve(tiny_model: Path) -> Iterator[ServeProcess]:
    """coa.serve speaking SGLang's routes and completion metadata (--protocol sglang)."""
    server = ServeProcess(
        tiny_model, "--served-model-name", "student", "--protocol", "sglang", dev_mode=False
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def server_config(model: Path, serve: ServeProcess, engine: str = "auto", **kw: Any) -> RLRunConfig:
    """A short server-backed run on the random tiny model: one generation of at most 24 ids per
    episode, the overlong term over the whole budget (so lengths make rewards differ), truncated
    episodes trained (a random model rarely closes a tag), a large learning rate (weights move)."""
    values: dict[str, Any] = {
        "base_model": str(model),
        "max_steps": 3,
        "prompts_per_step": 2,
        "group_size": 4,
        "steps_per_generation": 1,
        "save_steps": 1,
        "save_total_limit": 5,
        "learning_rate": 5e-2,
        "entropy_floor": None,
        "max_turns": 2,
        "max_new_tokens": 24,
        "max_total_tokens": 24,
        "overlong_buffer": 24,
        "mask_truncated": False,
        "tools": ToolsConfig(enabled=("code",), record="off"),
        "rollout": {
            "backend": "server",
            "server": {
                "name": "coa-serve",
                "base_url": serve.url,
                "model": "student",
                "timeout_s": 60,
                "engine": engine,
            },
        },
    }
    return RLRunConfig.model_validate(values | kw)


def logprobs_of(model: Any, ids: Sequence[int]) -> list[float]:
    with torch.inference_mode():
        logits = model(torch.tensor([list(ids)])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:]).view(-1, 1)).view(-1).tolist()


def served_logprobs(serve: ServeProcess, ids: list[int]) -> list[float]:
    body = {"model": "student", "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
    response = httpx.post(f"{serve.url}/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    entries = response.json()["choices"][0]["prompt_logprobs"]
    return [entries[i][str(ids[i])]["logprob"] for i in range(1, len(ids))]


def load(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder)).eval()


def close(a: Sequence[float], b: Sequence[float], tol: float = 2e-4) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=tol) for x, y in zip(a, b, strict=True))


def sampled_runs(ids: Sequence[int], mask: Sequence[int]) -> list[tuple[int, ...]]:
    """The maximal runs of mask-1 ids (each one generation of the policy)."""
    runs, run = [], []
    for token, m in zip(ids, mask, strict=True):
        if m:
            run.append(token)
        elif run:
            runs.append(tuple(run))
            run = []
    return runs + ([tuple(run)] if run else [])


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "engine",
    [
        "auto",  # probed: coa.serve in vLLM mode, its update_info disk transport
        "vllm",  # vLLM's adapter: /collective_rpc to the worker extension, /update_weight_version
        "sglang",  # SGLang's adapter against coa.serve --protocol sglang
    ],
)
def test_server_backend_syncs_weights_and_trains_the_sampled_ids(
    engine: str,
    request: pytest.FixtureRequest,
    tiny_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serve: ServeProcess = request.getfixturevalue("sglang_serve" if engine == "sglang" else "serve")
    generations: list[Generation] = []
    real = EndpointPolicy.generate

    async def spy(self: EndpointPolicy, ids: Sequence[int], max_new: int, sampling: Sampling) -> Generation:
        generation = await real(self, ids, max_new, sampling)
        generations.append(generation)
        return generation

    monkeypatch.setattr(EndpointPolicy, "generate", spy)
    result = run_rl(prompts_table(6), server_config(tiny_model, serve, engine), tmp_path / "run")
    assert (result.global_step, result.rollout_backend, result.mode) == (3, "server", "sync")
    assert result.rollout_stats["weight_version_mismatches"] == 0  # SGLang's reports agree with the stamps
    assert result.rollout_stats["weight_syncs"] == 3  # before each of the 3 generation batches
    table = pq.read_table(result.rollouts_file)
    assert schemas.ROLLOUT.check(table).ok
    rows = table.to_pylist()
    assert {r["step"] for r in rows} == {0, 1, 2}
    assert not any(r["old_kv"] for r in rows)  # sync: no push lands while a generation runs
    assert all(r["policy_version"] == r["step"] for r in rows)  # the server sampled with the pushed weights
    sampled = {tuple(g.ids) for g in generations}
    for r in rows:
        assert len(r["behaviour_logprobs"]) == len(r["completion_ids"])
        assert [lp is not None for lp in r["behaviour_logprobs"]] == [bool(m) for m in r["loss_mask"]]
        assert all(run in sampled for run in sampled_runs(r["completion_ids"], r["loss_mask"]))
    assert any(r["kept"] and sum(r["loss_mask"]) for r in rows)

    # the server's weights are the trainer's after the last sync (checkpoint-2), not the base model's
    base = load(tiny_model)
    synced = load(tmp_path / "run" / CHECKPOINTS_DIR / "checkpoint-2")
    before, after = logprobs_of(base, FIXED), logprobs_of(synced, FIXED)
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) > 1e-3  # training moved them
    served = served_logprobs(serve, FIXED)
    assert close(served, after) and not close(served, before)
    version_route = "/model_info" if engine == "sglang" else "/weight_info"
    assert httpx.get(f"{serve.root}{version_route}").json()["weight_version"] == "2"
    assert not list((tmp_path / "run" / "weight_sync").glob("v*"))  # removed at the end
    # the recorded behaviour logprobs of step 2 are those of the synced weights
    row = next(r for r in rows if r["step"] == 2 and sum(r["loss_mask"]))
    full = row["prompt_ids"] + row["completion_ids"]
    expected = logprobs_of(synced, full)[len(row["prompt_ids"]) - 1 :]
    got = [(lp, e) for lp, e in zip(row["behaviour_logprobs"], expected, strict=True) if lp is not None]
    assert close([g for g, _ in got], [e for _, e in got], 2e-3)


@pytest.mark.sandbox
@pytest.mark.parametrize("engine", ["auto", "sglang"])  # coa.serve's vLLM protocol (no version), SGLang's
def test_async_run_trains_nothing_beyond_max_staleness(
    engine: str, request: pytest.FixtureRequest, tiny_model: Path, tmp_path: Path
) -> None:
    serve: ServeProcess = request.getfixturevalue("sglang_serve" if engine == "sglang" else "serve")
    config = server_config(
        tiny_model,
        serve,
        engine,
        mode="async",
        max_staleness=1,
        max_steps=4,
        is_correction="tis",
        tis_cap=2.0,
        heldout_eval_steps=2,
    )
    result = run_rl(prompts_table(6), config, tmp_path / "run")
    assert (result.global_step, result.mode) == (4, "async")
    assert [p["step"] for p in result.heldout] == [0.0, 2.0, 4.0]  # the held-out score runs beside
    rows = pq.read_table(result.rollouts_file).to_pylist()
    kept = [r for r in rows if r["kept"]]
    assert len(kept) == 4 * 2 * 4  # every step trained prompts_per_step full groups
    assert all(r["policy_version"] is not None and r["step"] - r["policy_version"] <= 1 for r in kept)
    # the server reports no version (vLLM's protocol): the client's stamp is the version, so groups
    # generated while the trainer trained are one behind (the take step as version would make all 0)
    assert any(r["step"] - r["policy_version"] == 1 for r in kept)
    stale = [r for r in rows if r["step"] - r["policy_version"] > 1]
    assert all(not r["kept"] for r in stale)
    assert result.rollout_stats["staleness_max"] <= 1
    assert result.rollout_stats["stale_dropped_groups"] * 4 == len(stale)
    assert all({"tis/weight_mean", "async/wait_s", "async/staleness_max"} <= set(p) for p in result.curves)
    assert all(p["async/staleness_max"] <= 1 and 0 < p["tis/weight_mean"] <= 2.0 for p in result.curves)
    assert result.rollout_stats["weight_version_mismatches"] == 0  # SGLang's spans agree with the stamps


def write_run(tmp_path: Path, serve: ServeProcess, model: Path, max_steps: int) -> tuple[Path, Path]:
    prompts = tmp_path / "prompts.parquet"
    pq.write_table(prompts_table(6), prompts)
    config = server_config(model, serve, mode="async", max_steps=max_steps, max_staleness=1)
    data = config.model_dump(mode="json", exclude_none=True) | {"prompts": str(prompts)}
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, tmp_path / "out"


@pytest.mark.sandbox
@pytest.mark.slow  # a trainer subprocess (imports of torch and TRL), killed
def test_a_killed_async_run_resumes(serve: ServeProcess, tiny_model: Path, tmp_path: Path) -> None:
    planned = 6
    path, out = write_run(tmp_path, serve, tiny_model, planned)
    env = os.environ | {"PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "coa.rl.grpo", "--config", str(path), "--output-dir", str(out)]
    process = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    checkpoint = out / CHECKPOINTS_DIR / "checkpoint-2"
    while not checkpoint.is_dir() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process.poll() is None, f"the run ended before it was killed: {process.stderr.read()!r}"  # type: ignore[union-attr]
    assert checkpoint.is_dir(), "no checkpoint in 240 s"
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    assert not (out / "rl_result.json").exists()
    from coa.kit.checkpoints import last_complete
    from coa.rl.producer import PRODUCER_STATE_FILE

    last = last_complete(out / CHECKPOINTS_DIR)
    assert last is not None
    saved = json.loads((last / PRODUCER_STATE_FILE).read_text())  # the queue the resume starts from
    # the resume needs no process of its own: the same command line, run in this process
    from coa.rl.grpo import main

    assert main([*command[3:], "--resume"]) == 0
    result = json.loads((out / "rl_result.json").read_text())
    # resumed from a checkpoint (the last complete one: checkpoint-2 may have been cut mid-write)
    assert result["global_step"] == planned and 1 <= result["start_step"] < planned
    assert result["start_step"] == int(last.name.split("-")[1])
    assert result["steps_run"] == planned - result["start_step"]
    rows = pq.read_table(result["rollouts_file"]).to_pylist()
    assert sorted({r["step"] for r in rows if r["kept"]}) == list(range(planned))  # each step once
    # the groups queued at the checkpoint were taken by the resumed run as they were (each recorded
    # once, kept or dropped), not lost nor generated again; its draws went on from the saved cursor
    after = [
        tuple(r["completion_ids"]) for r in rows if r["step"] >= result["start_step"] and r["sample"] == 0
    ]
    queued = [tuple(group["episodes"][0]["completion_ids"]) for _, group in saved["queued"]]
    assert [after.count(ids) for ids in queued] == [1] * len(queued)
    assert saved["drawn"] >= result["start_step"] * 2 + len(queued)


@pytest.mark.sandbox
def test_the_entropy_guard_stops_an_async_run_and_its_producer(
    serve: ServeProcess, tiny_model: Path, tmp_path: Path
) -> None:
    import threading

    from coa.rl.config import EntropyCollapse

    config = server_config(
        tiny_model,
        serve,
        mode="async",
        max_steps=4,
        entropy_floor=100.0,
        entropy_grace_steps=0,
        entropy_window=1,
    )
    with pytest.raises(EntropyCollapse):
        run_rl(prompts_table(6), config, tmp_path / "run")
    assert not [t for t in threading.enumerate() if t.name == "coa-rl-producer"]  # stopped, not leaked


@pytest.mark.sandbox
def test_tis_is_refused_on_raw_logprobs(tiny_model: Path, tmp_path: Path) -> None:
    from coa.engines import EngineError

    raw = ServeProcess(tiny_model, "--served-model-name", "student", "--logprobs-mode", "raw_logprobs")
    try:
        raw.wait_ready()
        config = server_config(tiny_model, raw, "vllm", is_correction="tis", temperature=0.7)
        with pytest.raises(EngineError) as refused:
            run_rl(prompts_table(6), config, tmp_path / "run")
    finally:
        raw.stop()
    assert "\n" not in str(refused.value) and "--logprobs-mode processed_logprobs" in str(refused.value)
    assert not (tmp_path / "run" / "rollouts").exists()  # refused before any rollout


@pytest.mark.slow  # two trainer ranks under torchrun (imports of torch and TRL each)
def test_two_ranks_share_one_server_that_rank_0_feeds(
    serve: ServeProcess, tiny_model: Path, tmp_path: Path
) -> None:
    """backend: server on 2 ranks: rank 0 pushes the weights once per generation batch, rank 1 waits
    at the barrier, then both sample from the pushed version (their rows say so)."""
    prompts = tmp_path / "prompts.parquet"
    pq.write_table(prompts_table(6), prompts)
    config = server_config(tiny_model, serve, tools=ToolsConfig(enabled=(), record="off"))
    path = tmp_path / "rl.yaml"
    path.write_text(
        yaml.safe_dump(config.model_dump(mode="json", exclude_none=True) | {"prompts": str(prompts)})
    )
    out = tmp_path / "out"
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "-m",
        "tests.rl.ranks_main",
    ]
    process = subprocess.Popen(
        [*command, "--config", str(path), "--output-dir", str(out)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        text, _ = process.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"2-rank server-backed RL run hung past 240 s: {process.communicate()[0][-3000:]}")
    assert process.returncode == 0, text[-3000:]
    assert sorted(
        line.split()[1] for line in text.splitlines() if line.startswith("rank ") and " pid " in line
    ) == ["0", "1"]
    assert sum(" done: global step 3," in line for line in text.splitlines()) == 2
    result = json.loads((out / "rl_result.json").read_text())
    assert result["rollout_stats"]["weight_syncs"] == 3  # rank 0's pushes, one per generation batch
    rows = pq.read_table(out / "rollouts.parquet").to_pylist()
    kept = [r for r in rows if r["kept"]]
    assert len(kept) == 3 * 2 * 4  # the plan's 2 groups a step, one from each rank
    assert all(r["policy_version"] == r["step"] for r in rows)  # rank 1 too sampled the pushed weights
