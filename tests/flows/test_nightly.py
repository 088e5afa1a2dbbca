"""Nightly retraining end to end on the embedded backends: two nights, the gate, the registry.

Each night trains SFT then RL (the demo profile's ``rl`` section, tiny): the candidate is the RL
model. Night 1 has no champion: its candidate passes the lineage checks and is promoted. Night 2 offers
twice the tasks: only the new half is collected, curated together with night 1's runs, fine-tuned
from the champion and gated against it; its gate is set so no candidate can pass (a gain of 1.0),
so it is refused: the run still completes, the champion stays, and the reasons are in the registry
history and in the ``nightly-demo-gate`` Prefect artifact. A rerun of night 2 reuses every artifact and
records nothing twice. Night 3 offers no new task: it stops there, and its history row says so.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from prefect.client.orchestration import get_client

from coa import io
from coa.lineage import trace
from coa.registry.ledger import Ledger
from coa.registry.store import Registry

from .test_pipeline_flow import TINY_TRAINING, prefect_harness  # noqa: F401  (fixture)

# ~60 s on 2 shared cores (the Prefect harness ~15 s, night 1 ~25 s, night 2 ~18 s, the rerun ~1 s)
REPO = Path(__file__).resolve().parents[2]
NIGHT = [
    "synthetic.heldout={arithmetic: 2, multihop: 2, programming: 1}",
    "curate.gate.correctness_floor=0.3",
    "promotion={model_name: agent, sft_from: champion, gate: {bootstrap_samples: 200}}",
    *TINY_TRAINING,
]


async def _artifact(key: str) -> str:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    async with get_client() as client:
        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    latest = max(found, key=lambda a: a.created) if found else None  # type: ignore[arg-type,return-value]
    return str(latest.data) if latest else ""


async def _warnings() -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterLevel
    from prefect.logging.handlers import APILogHandler

    await APILogHandler.aflush()
    async with get_client() as client:
        logs = await client.read_logs(log_filter=LogFilter(level=LogFilterLevel(ge_=30)), limit=200)
    return [log.message for log in logs]


def test_two_nights_promote_then_refuse(
    prefect_harness: None,  # noqa: F811
    storage_root: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    from flows.nightly import nightly

    monkeypatch.chdir(REPO)
    start = time.perf_counter()
    first = nightly(
        config_path="configs/demo.yaml",
        overrides=["synthetic.train={arithmetic: 6, multihop: 6, programming: 3}", *NIGHT],
        night="2026-01-01",
    )
    night1_s = time.perf_counter() - start
    reg = Registry()
    assert first["outcome"] == "promoted", first["verdict"]
    assert reg.resolve("agent") == first["candidate"] == first["champion"]
    assert "no champion yet" in first["verdict"]["reasons"][-1]
    # RL ran after SFT and its model is the candidate: evaluated, gated (its steps run checked), promoted
    assert {s["stage"]: s for s in first["stages"]}["rl"]["status"] == "built"
    assert first["candidate"] == first["refs"]["rl"]["uri"] != first["refs"]["sft"]["uri"]
    rl_lineage = io.read_lineage(first["refs"]["rl"]["uri"])
    assert rl_lineage["base_model"] == first["refs"]["sft"]["uri"] and rl_lineage["steps_run"] == 2
    evaluated = io.read_lineage(first["refs"]["evaluate.candidate"]["uri"])["inputs"]["model"]["uri"]
    assert evaluated == first["candidate"] and first["verdict"]["checks"]["steps"]
    assert {n.uri for n in trace(first["refs"]["gate"]["uri"]).of_step("rl")} == {first["candidate"]}

    second_overrides = [
        "synthetic.train={arithmetic: 12, multihop: 12, programming: 6}",
        *NIGHT,
        "promotion.gate.min_gain=1.0",
    ]
    start = time.perf_counter()
    second = nightly(config_path="configs/demo.yaml", overrides=second_overrides, night="2026-01-02")
    night2_s = time.perf_counter() - start
    refs = second["refs"]
    fresh = io.read_lineage(refs["nightly.new_tasks"]["uri"])["result"]["summary"]
    assert fresh == {"offered": 30, "collected_before": 15, "new": 15}
    assert io.open_artifact(refs["collect"]["uri"]).rows() == 15  # only the new tasks were collected
    merged = io.open_artifact(refs["nightly.merge"]["uri"])
    assert merged.rows("trajectories") == 30 and merged.rows("tasks") == 30  # both nights, curated together
    assert io.read_lineage(refs["sft"]["uri"])["base_model"] == first["candidate"]  # from the champion
    assert second["outcome"] == "refused: the champion stays"
    assert any(r.startswith("no gain") for r in second["verdict"]["reasons"])
    assert second["verdict"]["per_benchmark"]  # compared with the champion per benchmark
    assert reg.resolve("agent") == first["candidate"]  # the champion stays
    history = reg.history("agent")
    assert [e.event for e in history] == ["promote", "candidate"]
    assert history[-1].model_uri == second["candidate"] and history[-1].reasons == tuple(
        second["verdict"]["reasons"]
    )
    assert set(history[-1].evaluations) == {"candidate", "champion"}
    published = asyncio.run(_artifact("nightly-demo-gate"))
    assert "refused" in published and "no gain" in published
    warned = asyncio.run(_warnings())
    assert any(m.startswith("gate: no gain") for m in warned), warned  # the flow run's log
    # the lineage of tonight's gate reaches both nights' collections
    graph = trace(refs["gate"]["uri"])
    collections = {n.uri for n in graph.of_step("collect")}
    assert {first["refs"]["collect"]["uri"], refs["collect"]["uri"]} <= collections
    assert [n.night for n in Ledger("demo").nights()] == ["2026-01-01", "2026-01-02"]

    start = time.perf_counter()
    again = nightly(config_path="configs/demo.yaml", overrides=second_overrides, night="2026-01-02")
    rerun_s = time.perf_counter() - start
    assert again["refs"] == refs and all(s["status"] == "reused" for s in again["stages"] if s["artifact"])
    assert len(reg.history("agent")) == 2  # nothing recorded twice
    # night 3 offers night 2's tasks again: none is new, so it stops there and its row says so
    start = time.perf_counter()
    third = nightly(config_path="configs/demo.yaml", overrides=second_overrides, night="2026-01-03")
    stop_s = time.perf_counter() - start
    assert (
        isinstance(third, dict)
        and third["outcome"] == "no new tasks"
        and set(third["seconds"]) <= {"synthetic", "nightly.new_tasks"}
    )
    assert reg.resolve("agent") == first["candidate"] and len(reg.history("agent")) == 2
    _check_history([first, second])
    print(f"night 3 (no new tasks) {stop_s:.1f} s")
    print(f"\nnightly timings: night 1 {night1_s:.1f} s, night 2 {night2_s:.1f} s, rerun {rerun_s:.1f} s")
    print(f"night 1 steps: {first['seconds']}\nnight 2 steps: {second['seconds']}")


def _check_history(nights: list[dict[str, Any]]) -> None:
    """The history artifact holds a row per night whose numbers are the nights' own artifacts'; its
    plot is an image in the markdown artifact; ``coa models history`` prints the same rows."""
    import asyncio
    import json

    from typer.testing import CliRunner

    from coa.cli import app
    from coa.registry.config import GateConfig
    from coa.registry.gate import estimate

    gate = GateConfig(bootstrap_samples=200)  # NIGHT's gate: primary metric `correct` on `all`
    rows = json.loads(asyncio.run(_artifact("nightly-demo-history")))
    assert [r["night"] for r in rows] == ["2026-01-01", "2026-01-02", "2026-01-03"]
    stopped = rows.pop()
    assert (
        stopped["stopped"] == "no new tasks" and stopped["tasks_new"] == 0 and stopped["runs_collected"] == 0
    )
    assert stopped["candidate"] is None and not stopped["promoted"] and "no new tasks" in stopped["reason"]
    assert [stopped[k] for k in ("champion", "champion_low", "champion_high")] == [
        rows[1][k] for k in ("champion", "champion_low", "champion_high")
    ]  # the champion stays, with its interval
    for row, night in zip(rows, nights, strict=True):
        refs = night["refs"]
        collected = io.read_lineage(refs["collect"]["uri"])["result"]["summary"]
        assert row["runs_collected"] == io.open_artifact(refs["collect"]["uri"]).rows() == collected["runs"]
        assert row["teacher_tokens"] == collected["prompt_tokens"] + collected["completion_tokens"] > 0
        assert (
            row["tasks_new"] == io.read_lineage(refs["nightly.new_tasks"]["uri"])["result"]["summary"]["new"]
        )
        assert row["runs_kept"] == io.open_artifact(refs["curate"]["uri"]).rows("trajectories")
        assert row["sft_steps"] == io.read_lineage(refs["sft"]["uri"])["steps_run"]
        assert row["rl_steps"] == io.read_lineage(refs["rl"]["uri"])["steps_run"]
        metrics = json.loads(io.read_file(refs["evaluate.candidate"]["uri"], "metrics.json"))["families"][
            "all"
        ]
        # the gate's primary metric with the gate's bootstrap interval, from the night's evaluation
        table = io.read_table(refs["evaluate.candidate"]["uri"], "eval")
        own = estimate(table, gate)
        assert own is not None and row["metric"] == "correct on all" and row["confidence"] == 0.95
        assert (row["candidate"], row["candidate_low"], row["candidate_high"]) == (
            own.value,
            own.low,
            own.high,
        )
        assert row["candidate"] == pytest.approx(metrics["pass@1"]) and own.low <= own.value <= own.high
        assert row["promoted"] == night["verdict"]["promote"]
        assert row["reason"] == "; ".join(night["verdict"]["reasons"])
    assert rows[0]["champion"] == rows[0]["candidate"]  # promoted: the candidate is the champion
    assert rows[0]["champion_low"] == rows[0]["candidate_low"] and rows[0]["delta"] is None  # none to pair
    champion = io.read_file(nights[1]["refs"]["evaluate.champion"]["uri"], "metrics.json")
    assert rows[1]["champion"] == pytest.approx(json.loads(champion)["families"]["all"]["pass@1"])  # it stays
    champ = estimate(io.read_table(nights[1]["refs"]["evaluate.champion"]["uri"], "eval"), gate, 1)
    assert champ is not None and (rows[1]["champion_low"], rows[1]["champion_high"]) == (
        champ.low,
        champ.high,
    )
    delta = nights[1]["verdict"]["primary"]["delta"]  # the paired delta the gain check read
    assert (rows[1]["delta"], rows[1]["delta_low"], rows[1]["delta_high"]) == (
        delta["delta"], delta["low"], delta["high"],
    ) and delta["low"] <= delta["delta"] <= delta["high"]  # fmt: skip
    plot = asyncio.run(_artifact("nightly-demo-history-plot"))
    assert "data:image/png;base64," in plot
    from unittest import mock

    from rich.console import Console

    # the rows, not the terminal's layout: the CLI's console was sized when it was imported
    with mock.patch("coa._cli.models.console", Console(width=250)):
        printed = CliRunner().invoke(app, ["models", "history", "agent"])
    assert printed.exit_code == 0, printed.output
    assert "2026-01-01" in printed.output and "2026-01-02" in printed.output and "refused" in printed.output
    assert "stopped (no new tasks)" in printed.output and "bootstrap interval" in printed.output
