"""An LLM judge for open-ended answers (web family), over the :mod:`coa.llm` layer.

The prompt is versioned data (``prompts/judge.yaml``); every verdict's :class:`~coa.scoring.Score`
names the judge model and prompt version and carries the rationale (the audit trail). Calls go
through :class:`coa.llm.LLMRouter` (role ``judge``), so verdicts are cached in the response cache: a
rerun replays them for free, and the budget and rate limits of the run apply. The reply must be a
JSON object ``{"rationale", "judgement"}``; code fences around it are tolerated (AFM's judge scored
fenced replies 0). An unreadable reply is retried with a new sample id; after ``max_attempts`` the
answer is scored incorrect with method ``web:judge_unreadable``.

The judge is synchronous (the scoring interface is); it runs its async client on a private event
loop thread, created on first use and closed by :meth:`LLMJudge.close`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from importlib import resources
from typing import Any

import yaml

from coa.llm import LLMConfig, LLMRouter
from coa.scoring import Score


@functools.cache
def judge_prompt() -> dict[str, str]:
    data = yaml.safe_load(resources.files("coa.scoring").joinpath("prompts", "judge.yaml").read_text("utf-8"))
    return {k: str(v) for k, v in data.items()}


_JSON = re.compile(r"\{.*\}", re.DOTALL)


def parse_verdict(text: str) -> tuple[bool, str] | None:
    """(correct, rationale) from a judge reply, or None when it is not readable."""
    m = _JSON.search(text)
    if m is None:
        return None
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    judgement = str(data.get("judgement", "")).strip().lower() if isinstance(data, dict) else ""
    if judgement not in ("correct", "incorrect"):
        return None
    return judgement == "correct", str(data.get("rationale", "")).strip()


class LLMJudge:
    """``judge(prediction, gold_answers, question=...) -> Score`` on the ``judge`` endpoint."""

    def __init__(self, config: LLMConfig, max_attempts: int = 3) -> None:
        if not config.endpoints:
            raise ValueError("the judge needs an endpoint (llm.endpoints) with an OpenAI-compatible API")
        self.config = config
        self.max_attempts = max_attempts
        self.model = config.endpoint("judge").model
        self._loop: asyncio.AbstractEventLoop | None = None
        self._router: LLMRouter | None = None
        self._lock = threading.Lock()

    def check(self, fix: str = "evaluate.judge.endpoints") -> None:
        """Check the judge endpoint with one short request before the first task is judged: unreachable
        or not serving chat completions raises :class:`~coa.llm.preflight.EndpointUnusable` (exit 3)."""
        from coa.llm.preflight import check_endpoints

        asyncio.run(check_endpoints([self.config.endpoint("judge")], what="judge", fix=fix))

    def _submit(self, coro: Any) -> Future[Any]:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="coa-judge", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _ask(self, messages: list[dict[str, str]], attempt: int) -> tuple[str, bool]:
        if self._router is None:
            self._router = LLMRouter(self.config)
        result = await self._router.chat("judge", messages, temperature=0.0, sample_id=f"judge-{attempt}")
        return result.text, result.cached

    def complete(self, messages: list[dict[str, str]], attempt: int = 0) -> str:
        """One reply of the judge endpoint to ``messages`` (cached; ``attempt`` is a new sample).

        What the benchmark graders (:mod:`coa.scoring.benchmarks.graders`) call."""
        text, _ = self._submit(self._ask(messages, attempt)).result()
        return str(text)

    def __call__(self, prediction: str, gold_answers: Sequence[str], *, question: str | None) -> Score:
        prompt = judge_prompt()
        messages = [
            {"role": "system", "content": prompt["system"].strip()},
            {
                "role": "user",
                "content": prompt["user"]
                .format(
                    question=question or "(not given)", gold=" | ".join(gold_answers), prediction=prediction
                )
                .strip(),
            },
        ]
        tag = f"{self.model}/{prompt['version']}"
        for attempt in range(self.max_attempts):
            text, cached = self._submit(self._ask(messages, attempt)).result()
            verdict = parse_verdict(text)
            if verdict is not None:
                correct, rationale = verdict
                detail = f"judge {tag}{' (cached)' if cached else ''}: {rationale}"
                return Score(1.0 if correct else 0.0, correct, "web:judge", detail)
        return Score(
            0.0,
            False,
            "web:judge_unreadable",
            f"judge {tag}: no readable verdict in {self.max_attempts} tries",
        )

    def close(self) -> None:
        if self._loop is None:
            return
        if self._router is not None:
            self._submit(self._router.aclose()).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop = None
