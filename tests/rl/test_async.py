"""Async RL's pieces without a server: the staleness bound of a batch, TIS weights of a hand-made
batch, the TIS trainer's loss, and the backends' config rules."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from coa.rl.config import RLStageConfig
from coa.rl.producer import GroupProducer, staleness
from coa.rl.rewards import Reward
from coa.rl.rollouts import Group, RolloutSource
from coa.rl.tis import corrected_trainer, tis_weights
from coa.rollout.episode import Episode
from tests.rollout.helpers import SpyToolBox

from .helpers import math_prompt

PROMPTS = [math_prompt(i, 100 + i, 200 + i) for i in range(4)]


def params(**kw: Any) -> RLStageConfig:
    values = {"prompts_per_step": 2, "group_size": 2, "steps_per_generation": 1, "max_staleness": 1}
    return RLStageConfig(**(values | kw))


def reward(total: float) -> Reward:
    return Reward(total, 0.0, 0.0, 0.0, total, total > 0, True, False, None)


def group(i: int, version: int, totals: tuple[float, float] = (0.0, 1.0)) -> Group:
    episodes = []
    for k, _ in enumerate(totals):
        e = Episode(f"m{i}", k, [1, 2])
        e.add_sampled([5, 6], [-0.5, -0.25])
        e.add_environment([7])
        e.policy_versions = [version, version + 1]  # its oldest generation counts
        e.finish = "answer"
        episodes.append(e)
    return Group(PROMPTS[i]["prompt_id"], f"m{i}", i, "code_math", episodes, [reward(t) for t in totals])


def producer_with(queued: list[Group], p: RLStageConfig) -> GroupProducer:
    producer = GroupProducer(RolloutSource(PROMPTS, p, SpyToolBox()), policy=None, start_step=0)  # type: ignore[arg-type]
    producer._thread = threading.current_thread()  # alive: take() waits on the queue only
    for g in queued:
        producer.ready.put(g)
    return producer


def test_no_group_beyond_max_staleness_is_trained() -> None:
    p = params(max_staleness=1)
    queued = [group(0, 3), group(1, 6), group(2, 5), group(3, 7)]  # at step 7: 4, 1, 2, 0 versions behind
    batch = producer_with(queued, p).take(step=7)
    assert [g.prompt_id for g in batch.groups] == [PROMPTS[1]["prompt_id"], PROMPTS[3]["prompt_id"]]
    assert all(staleness(g, 7, 1) <= 1 for g in batch.groups)
    assert batch.stats["async/stale_dropped"] == 2 and batch.stats["async/staleness_max"] == 1
    rows = batch.rows
    assert len(rows) == 4 * 2  # the stale groups' episodes are recorded too, never kept
    assert {(r["prompt_id"], r["kept"]) for r in rows} == {
        (PROMPTS[0]["prompt_id"], False),
        (PROMPTS[1]["prompt_id"], True),
        (PROMPTS[2]["prompt_id"], False),
        (PROMPTS[3]["prompt_id"], True),
    }
    assert {r["prompt_id"]: r["policy_version"] for r in rows}[PROMPTS[1]["prompt_id"]] == 6
    assert rows[0]["behaviour_logprobs"] == [-0.5, -0.25, None]


def test_staleness_counts_generation_batches() -> None:
    g = group(0, 4)
    assert staleness(g, 8, 2) == 2 and staleness(g, 9, 2) == 2 and staleness(g, 4, 2) == 0
    assert staleness(g, 7, 1) == 3


def test_equal_reward_groups_are_set_aside_then_top_up_the_batch() -> None:
    p = params(max_refill_rounds=0)  # a budget of prompts_per_step fresh groups
    queued = [group(0, 5, (1.0, 1.0)), group(1, 5), group(2, 5, (0.0, 0.0)), group(3, 5, (0.0, 0.0))]
    batch = producer_with(queued, p).take(step=5)
    kept = [g.prompt_id for g in batch.groups]
    assert PROMPTS[1]["prompt_id"] in kept and len(kept) == 2
    assert batch.stats["dynamic/shortfall_groups"] == 1


def test_tis_weights_of_a_hand_made_batch() -> None:
    trainer = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.1, -3.0, 0.0, 0.0]])
    behaviour = torch.tensor([[-1.5, -1.0, float("nan"), 0.0], [-2.0, -3.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]])
    w = tis_weights(trainer, behaviour, mask, cap=2.0)
    expected = [[math.exp(0.5), math.exp(-1.0), 1.0, 1.0], [2.0, 1.0, 1.0, 1.0]]  # exp(1.9) capped at 2
    assert torch.allclose(w, torch.tensor(expected), atol=1e-6)
    assert not w.requires_grad


def test_the_tis_trainer_weights_each_tokens_advantage() -> None:
    seen: dict[str, Any] = {}

    class Base:
        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            seen.update(inputs)
            return inputs["advantages"].sum()

    trainer = corrected_trainer(Base)()
    weights = torch.tensor([[2.0, 0.5], [1.0, 1.0]])
    trainer._compute_loss(None, {"advantages": torch.tensor([1.0, -2.0]), "coa_tis_weights": weights})
    assert torch.equal(seen["advantages"], torch.tensor([[2.0, 0.5], [-2.0, -2.0]]))


def test_async_needs_the_server_backend() -> None:
    with pytest.raises(ValidationError, match="backend: server"):
        params(mode="async")
    assert params(mode="async", rollout={"backend": "server"}).groups_in_flight == 2 * 2


def test_the_server_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from coa.rl.server import admin_root, server_endpoint
    from coa.rollout.policies.endpoint import EndpointError

    p = params(rollout={"backend": "server"})
    monkeypatch.delenv("COA_RL_SERVER_URL", raising=False)
    with pytest.raises(EndpointError, match="COA_RL_SERVER_URL"):
        server_endpoint(p)
    monkeypatch.setenv("COA_RL_SERVER_URL", "http://10.0.0.5:8000/v1")
    monkeypatch.setenv("COA_RL_SERVER_MODEL", "student")
    endpoint = server_endpoint(p)
    assert endpoint.model == "student" and admin_root(endpoint) == "http://10.0.0.5:8000"


def test_old_rollout_tables_still_read(tmp_path: Path) -> None:
    """A rollout.v1 file written before policy_version / behaviour_logprobs reads, with nulls."""
    import pyarrow.parquet as pq

    import schemas
    from coa.rl.rollouts import rollout_row

    row = rollout_row(group(0, 3), 0, 4, True, True, 4)
    old = schemas.ROLLOUT.from_rows([row]).drop_columns(["policy_version", "behaviour_logprobs"])
    pq.write_table(old, tmp_path / "old.parquet")
    table = schemas.ROLLOUT.conform(pq.read_table(tmp_path / "old.parquet"))
    assert table.column("policy_version").to_pylist() == [None]
    assert table.column("behaviour_logprobs").to_pylist() == [None]
    assert schemas.ROLLOUT.from_rows([row]).column("policy_version").to_pylist() == [3]


def test_an_unreachable_server_fails_with_the_fix(tmp_path: Path) -> None:
    import socket

    from coa.engines import EngineError
    from coa.llm.config import EndpointConfig
    from coa.rl.server import WeightSync

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = EndpointConfig(
        name="gone", base_url=f"http://127.0.0.1:{port}/v1", model="student", timeout_s=5
    )
    with pytest.raises(EngineError, match="python -m coa.serve") as failed:
        WeightSync(endpoint, tmp_path).check()
    assert failed.value.exit_code == 3  # missing infrastructure
