"""Async RL's pieces without a server: the staleness bound of a batch, TIS weights of a hand-made
batch, the TIS trainer's loss, and the backends' config rules."""

from __future__ import annotations

import json
import math
import threading
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
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
    producer = GroupProducer(RolloutSource(PROMPTS, p, SpyToolBox()), policy=None)  # type: ignore[arg-type]
    producer._thread = threading.current_thread()  # alive: take() waits on the queue only
    for draw, g in enumerate(queued):
        producer.ready.put((draw, g))
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
    """Through the public ``compute_loss`` hook: the batch's trainer logprobs (TRL's
    ``old_per_token_logps``) against the behaviour ones, else one no-grad forward."""
    seen: dict[str, Any] = {}
    forwards: list[int] = []

    class Base:
        _metrics: dict[str, Any] = {"train": defaultdict(list)}
        args = SimpleNamespace(per_device_train_batch_size=2)
        model = None

        def compute_loss(self, model: Any, inputs: dict[str, Any], *rest: Any) -> Any:
            seen.clear()
            seen.update(inputs)
            return inputs["advantages"].sum()

        def _get_per_token_logps_and_entropies(
            self, model: Any, ids: Any, mask: Any, keep: int, **kw: Any
        ) -> Any:
            forwards.append(keep)
            return torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]])), None, None

    trainer = corrected_trainer(Base)()
    trainer.coa_tis_cap = 2.0
    behaviour = torch.log(torch.tensor([[0.25, 1.0], [0.5, 0.5]]))
    inputs = {
        "advantages": torch.tensor([1.0, -2.0]),
        "sampling_per_token_logps": behaviour,
        "old_per_token_logps": torch.log(torch.tensor([[0.75, 0.5], [0.5, 0.5]])),
        "completion_mask": torch.ones(2, 2),
    }
    trainer.compute_loss(None, inputs)
    assert torch.allclose(seen["advantages"], torch.tensor([[2.0, 0.5], [-2.0, -2.0]]))  # 3 capped at 2
    assert not forwards
    ids = {
        "prompt_ids": torch.ones(2, 1),
        "prompt_mask": torch.ones(2, 1),
        "completion_ids": torch.ones(2, 2),
    }
    trainer.compute_loss(None, {**inputs, "old_per_token_logps": None, **ids})
    assert forwards == [2]  # no old logprobs (one optimizer step per batch): the weights now
    assert torch.allclose(seen["advantages"], torch.tensor([[2.0, 0.5], [-2.0, -2.0]]))
    trainer.coa_tis_cap = None
    trainer.compute_loss(None, inputs)
    assert torch.equal(seen["advantages"], inputs["advantages"])  # is_correction: none


def test_trl_still_corrects_only_with_use_vllm() -> None:
    """The TRL 1.16 lines coa/rl/tis.py cites: if a TRL upgrade corrects a rollout_func's logprobs
    without use_vllm, this fails and the override can go."""
    import trl.trainer.grpo_trainer as grpo

    lines = Path(grpo.__file__).read_text().splitlines()
    gate = "self.use_vllm and self.vllm_importance_sampling_correction"
    assert gate in " ".join(lines[2642:2645])  # old_per_token_logps (2643-2645)
    assert gate in lines[2659]  # the ratio (2660)
    assert gate in lines[2907] and "importance_sampling_ratio" in lines[2908]  # into the batch (2908-2909)
    loss = lines[3145:3147]  # the loss (3146-3147)
    assert gate in loss[0] and 'inputs["importance_sampling_ratio"]' in loss[1]
    assert 'output["sampling_per_token_logps"]' in lines[2910]  # what a rollout_func's logprobs become
    # no other place applies it (the other two: VESPO's mode check at 936, the ratio's metrics at 2860)
    assert [i + 1 for i, line in enumerate(lines) if gate in line] == [936, 2644, 2660, 2860, 2908, 3146]


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


def test_a_restored_producer_loses_no_group_and_draws_the_same_prompts(codec: Any) -> None:
    """A producer snapshotted between two batches (its state through JSON, as a checkpoint holds it)
    while it keeps generating, then a new one restored from it: every draw is taken once or still
    pending at the end, never twice; the restored queue comes back as it was, first; each draw's
    prompt is the seed's, whichever producer drew it."""
    from coa.rl.producer import group_from_json, group_to_json
    from coa.rollout.policies.scripted import ScriptedPolicy

    from .helpers import answer

    prompts = [math_prompt(i, 100 + i, 200 + i) for i in range(3)]
    p = params(prompts_per_step=2, max_staleness=1000, dynamic_sampling=False, async_groups_in_flight=4)
    replies = {f"What is {100 + i} + {200 + i}?": [answer(str(300 + 2 * i))] for i in range(3)}

    def producer() -> GroupProducer:
        policy = ScriptedPolicy(codec, replies, latency_s=0.01)
        return GroupProducer(RolloutSource(prompts, p, SpyToolBox()), policy)

    def draws(groups: list[Group]) -> list[int]:
        return [int(g.draw) for g in groups if g.draw is not None]

    first = producer()
    first.start()
    taken = [g for step in range(2) for g in first.take(step).groups]
    state = json.loads(json.dumps(first.snapshot()))
    first.stop()  # the producer went on generating after the checkpoint, as a killed run's does
    queued = [d for d, _ in state["queued"]]
    running = [d for d, _ in state["running"]]
    assert sorted(draws(taken) + queued + running) == list(range(state["drawn"]))  # none lost, none twice

    resumed = producer()
    resumed.restore(state)
    resumed.start()
    later = [g for step in range(2, 5) for g in resumed.take(step).groups]
    end = resumed.snapshot()
    resumed.stop()
    assert draws(later)[: len(queued)] == queued  # the saved queue first, in its order
    assert [group_to_json(g) for g in later[: len(queued)]] == [g for _, g in state["queued"]]
    pending = [d for d, _ in end["queued"]] + [d for d, _ in end["running"]]
    assert sorted(draws(later) + pending) == sorted(
        queued + running + list(range(state["drawn"], end["drawn"]))
    )
    fresh = producer()
    assert all(g.prompt_id == fresh.prompt_of(int(g.draw)) for g in taken + later if g.draw is not None)
    passes = {tuple(fresh.prompt_of(n) for n in range(3 * k, 3 * k + 3)) for k in range(6)}
    assert len(passes) > 1  # a new order each pass
    assert group_to_json(group_from_json(group_to_json(taken[0]))) == group_to_json(taken[0])
