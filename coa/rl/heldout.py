"""The held-out score of an RL run and the reward-hacking alarm it feeds.

With ``heldout_eval_steps`` set, :func:`split_prompts` keeps a slice of the RL prompts out of
training (whole tasks, by a hash of the task id, as SFT's held-out examples), and
:class:`HeldoutEval` (a ``TrainerCallback``) scores them with one greedy rollout each, through the
same rollout engine and rewards as training, on the trainer's own weights: before the first step
and at the end of every ``heldout_eval_steps``-th optimizer step. After each evaluation the rule
of :mod:`coa.rl.alarm` runs on the training reward curve and the held-out curve (share correct);
when it fires, the message is logged as a WARNING on ``coa.rl`` and kept (the first firing is the
run's ``alarm``: ``rl_result.json``, the lineage, the Prefect artifact, the curves figure). The
run goes on: the alarm is for a person to read.

The points are saved to ``heldout.json`` in the output folder after each evaluation, so a resumed
run keeps those up to its checkpoint. On several ranks every rank enters the evaluation (ZeRO-3's
shards are gathered for it), rank 0 alone scores, and its points and alarms are broadcast, so every
rank reports the same held-out curve and alarm (:mod:`coa.rl.ranks`).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from coa.rl.alarm import reward_hacking_alarm
from coa.rl.config import RLStageConfig
from coa.rl.ranks import from_main, generation_model
from coa.rl.rollouts import RolloutSource
from coa.rollout import Policy

log = logging.getLogger("coa.rl")

HELDOUT_FILE = "heldout.json"


def split_prompts(
    rows: Sequence[Mapping[str, Any]], fraction: float, max_prompts: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, held-out)`` prompts: whole tasks in the order of a hash of their id until the held-out
    set holds ``fraction`` of the prompts (at most ``max_prompts``, at least one); the last task always
    trains. Deterministic, so a resumed run holds out the same prompts."""
    task_ids = [str(r["task_id"]) for r in rows]
    tasks = sorted(set(task_ids), key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    target = max(1, min(max_prompts, round(fraction * len(rows))))
    chosen: set[str] = set()
    taken = 0
    for task in tasks[:-1]:
        if taken >= target:
            break
        chosen.add(task)
        taken += task_ids.count(task)
    train = [dict(r) for r, t in zip(rows, task_ids, strict=True) if t not in chosen]
    heldout = [dict(r) for r, t in zip(rows, task_ids, strict=True) if t in chosen]
    return train, heldout


class HeldoutEval(TrainerCallback):
    """Scores the held-out prompts on a schedule and checks the reward-hacking rule (see the module).

    ``policy_of(model, tokenizer)`` makes the policy on the trainer's weights (the run's HF policy,
    or a test's scripted one); ``trainer`` is set once the trainer exists.
    """

    def __init__(
        self,
        source: RolloutSource,
        params: RLStageConfig,
        policy_of: Callable[[Any, Any], Policy],
        out: Path,
    ) -> None:
        assert params.heldout_eval_steps is not None
        self.source, self.params, self.policy_of = source, params, policy_of
        self.every = params.heldout_eval_steps
        self.path = out / HELDOUT_FILE
        self.trainer: Any = None
        self.points: list[dict[str, float]] = []
        self.alarms: list[dict[str, Any]] = []

    @property
    def alarm(self) -> str | None:
        return str(self.alarms[0]["message"]) if self.alarms else None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        start = int(state.global_step)
        if start > 0 and self.path.is_file():  # resumed: keep what was measured up to the checkpoint
            saved = json.loads(self.path.read_text())
            self.points = [p for p in saved["points"] if p["step"] <= start]
            self.alarms = [a for a in saved["alarms"] if a["step"] <= start]
        if not any(p["step"] == start for p in self.points):
            self._evaluate(state)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every == 0:
            self._evaluate(state)

    def _evaluate(self, state: Any) -> None:
        if self.trainer is None:
            return
        trainer = self.trainer
        with generation_model(trainer) as model:  # every rank enters (ZeRO-3 gathers); rank 0 scores
            if trainer.is_world_process_zero():
                self._score(model, state)
        # every rank holds rank 0's points and alarms, so every rank's result reports the same
        self.points, self.alarms = from_main(trainer, (self.points, self.alarms))

    def _score(self, model: Any, state: Any) -> None:
        was_training = model.training
        model.eval()
        try:
            score = self.source.score(self.policy_of(model, self.trainer.processing_class))
        finally:
            model.train(was_training)
        step = int(state.global_step)
        self.points.append({"step": float(step), **score})
        log.info(
            "rl held-out at step %d: %.0f%% correct, %.0f%% format-valid on %d prompts",
            step,
            100 * score["correct"],
            100 * score["format_valid"],
            len(self.source.order),
        )
        train = [(float(e["step"]), float(e["reward"])) for e in state.log_history if "reward" in e]
        message = reward_hacking_alarm(
            train,
            [(p["step"], p["correct"]) for p in self.points],
            self.params.alarm_window,
            self.params.alarm_reward_rise,
            self.params.alarm_heldout_drop,
        )
        if message is not None:
            log.warning("%s", message)
            self.alarms.append({"step": step, "message": message})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps({"points": self.points, "alarms": self.alarms}, indent=2))
        tmp.replace(self.path)
