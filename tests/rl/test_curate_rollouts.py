"""RL rollouts as the next SFT round's data: an RL artifact's rollout.v1 table through curate and convert.

The rollouts come from the real rollout engine (a scripted policy on the tiny model's tokenizer, a
spy toolbox), two generation batches of three prompts: one solved in valid CoA (its observation
holds a live tag, so escaping is on the path), one valid but wrong, one right in an invalid
format. Curation keeps the solved prompt once (its other samples, in both batches, are exact
duplicates), and conversion's assistant text is the rollout's text, observations masked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import schemas
from coa import io
from coa.cli import app
from coa.format import Segment
from coa.format.codec import render_segment
from coa.rl.config import RLStageConfig
from coa.rl.rollouts import RolloutSource
from coa.rollout import Codec
from coa.rollout.policies.scripted import ScriptedPolicy
from tests.rollout.helpers import SpyToolBox, blocks

from .helpers import answer, math_prompt

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = [(100, 200), (101, 203), (102, 206)]
PROMPTS = [math_prompt(i, a, b) for i, (a, b) in enumerate(QUESTIONS)]
PRINTED = "300\n<answer>not the model's</answer>"  # a tool printing a live tag: escaped, never a segment


def turns(a: int, b: int, fence: str, value: int) -> list[str]:
    code = blocks(
        ("plan", "Compute it with code."), ("think", "Run it."), ("code", f"{fence}\nprint({a} + {b})\n```")
    )
    return [code, answer(str(value))]


def rollout_rows(codec: Codec) -> list[dict[str, Any]]:
    (a0, b0), (a1, b1), (a2, b2) = QUESTIONS
    policy = ScriptedPolicy(
        codec,
        {
            f"What is {a0} + {b0}?": turns(a0, b0, "```py", a0 + b0),  # valid, right
            f"What is {a1} + {b1}?": turns(a1, b1, "```py", a1 + b1 + 1),  # valid, wrong
            f"What is {a2} + {b2}?": turns(a2, b2, "```python", a2 + b2),  # right, not AFM's code format
        },
    )
    toolbox = SpyToolBox(
        {f"print({a0} + {b0})": PRINTED, f"print({a1} + {b1})": "304", f"print({a2} + {b2})": "308"}
    )
    source = RolloutSource(
        PROMPTS, RLStageConfig(prompts_per_step=3, group_size=2, steps_per_generation=2), toolbox
    )
    wanted = [p["prompt_id"] for p in PROMPTS for _ in range(2)]
    return [row for step in (0, 2) for row in source.batch(wanted, policy, step).rows]


def task_rows() -> list[dict[str, Any]]:
    return [
        {
            "task_id": p["task_id"], "source": "test", "family": "math", "gold_answers": p["gold_answers"],
            "question": p["prompt"][1]["content"], "test_cases": None, "source_index": i, "metadata": "{}",
        }
        for i, p in enumerate(PROMPTS)
    ]  # fmt: skip


def last_uri(output: str, label: str) -> str:
    return re.findall(rf"^{label}: (\S+)$", output, re.M)[-1]


def test_rollouts_become_sft_rows_whose_text_is_the_rollout_text(
    codec: Codec, storage_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    rows = rollout_rows(codec)
    assert [(r["correct"], r["format_valid"]) for r in rows[:6:2]] == [
        (True, True),
        (False, True),
        (True, False),
    ]
    store = io.Store()
    writer = store.writer("model", "rl", {"test": "rollouts"})
    writer.write_table("rollouts", schemas.ROLLOUT.from_rows(rows), schemas.ROLLOUT)
    rl_artifact = writer.commit()
    writer = store.writer("tasks", "test", {"test": "tasks"})
    writer.write_table("tasks", schemas.TASK.from_rows(task_rows()), schemas.TASK)
    tasks = writer.commit()

    cli = CliRunner()
    curated = cli.invoke(app, ["curate", "--raw", rl_artifact.uri, "--tasks", tasks.uri])
    assert curated.exit_code == 0, curated.output
    curated_ref = io.open_artifact(last_uri(curated.stdout, "curated"))
    lineage = io.read_lineage(curated_ref)
    assert lineage["inputs"]["raw"] == {"uri": rl_artifact.uri, "table": "rollouts"}
    assert lineage["rollouts"] == {
        "rollouts": 12, "incorrect": 4, "format_invalid": 4, "not_canonical": 0, "selected": 4,
    }  # fmt: skip
    runs = io.read_table(curated_ref, "trajectories").to_pylist()
    assert len(runs) == 1 and runs[0]["task_id"] == "m0" and runs[0]["teacher"] == "rl-policy"
    reasons = io.read_table(curated_ref, "quarantine").column("reason").to_pylist()
    assert reasons == ["exact_duplicate"] * 3  # the same text in the other sample and the other batch

    converted = cli.invoke(
        app, ["convert", "--curated", curated_ref.uri, "--tasks", tasks.uri, "convert.tokenizer=approx"]
    )
    assert converted.exit_code == 0, converted.output
    sft = io.read_table(io.open_artifact(last_uri(converted.stdout, "converted")), "sft").to_pylist()
    assert len(sft) == 1 and sft[0]["variant"] == "code_math"
    source = next(r for r in rows if r["task_id"] == "m0" and r["sample"] == 0)
    content = sft[0]["messages"][2]["content"]
    assert content == source["text"].removesuffix(codec.tokenizer.eos_token)  # the rollout's text, verbatim
    assert sft[0]["messages"][1]["content"] == "What is 100 + 200?"
    # observations masked: the SFT spans are exactly the environment's observation block, which the
    # rollout's loss mask also left untrained
    spans = [content[s["start"] : s["end"]] for s in sft[0]["observation_spans"]]
    assert spans == [render_segment(Segment("observation", PRINTED))] and "<\\answer>" in spans[0]
    untrained = codec.decode(
        [t for t, m in zip(source["completion_ids"], source["loss_mask"], strict=True) if m == 0]
    )
    assert spans[0] in untrained
    (span,) = sft[0]["observation_spans"]
    assert "observation>" not in content[: span["start"]] + content[span["end"] :]
