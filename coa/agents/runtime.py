"""The multi-agent teacher: plan → delegate (search / code agents) → reflect → verify → answer.

One :class:`MultiAgentTeacher` solves one task at a time (many concurrently under asyncio) and
returns a ``trajectory.v1`` row. Each agent turn is recorded in order (a row of the schema's
``steps``) with the agent, the role, the model's text, the tool call and its observation, tokens,
latency and errors. Limits: manager turns (``max_steps``), turns per delegation
(``max_agent_steps``), and wall time per task. Nothing here knows which model answers: that is the
:class:`~coa.agents.backend.ModelBackend`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import time
from typing import Any

from coa.agents import prompts
from coa.agents.actions import (
    Action,
    ParseError,
    parse_action,
    parse_plan,
    parse_reflection,
    parse_verification,
)
from coa.agents.backend import (
    BudgetStop,
    Message,
    ModelBackend,
    ModelError,
    ModelReply,
    ModelUnavailable,
    current_run_id,
)
from coa.agents.config import TeacherConfig as TeacherConfig  # its home is coa.agents.config
from coa.errors import CoaError
from coa.tools.toolbox import ToolBox

SEARCH_TOOLS = ("web_search", "wiki_search", "crawl_page")


class TurnLimit(CoaError, RuntimeError):
    """The manager used its ``max_steps`` turns without a verified answer (the run's status: step_limit)."""


@dataclasses.dataclass
class Recorder:
    """Collects the steps of one run in ``trajectory.v1`` step layout."""

    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    costs: list[float] = dataclasses.field(default_factory=list)

    def add(
        self,
        agent: str,
        role: str,
        *,
        text: str | None = None,
        tool_name: str | None = None,
        tool_args: dict[str, Any] | None = None,
        observation: str | None = None,
        fields: dict[str, Any] | None = None,
        reply: ModelReply | None = None,
        latency_s: float | None = None,
        error: str | None = None,
        started_at: dt.datetime | None = None,
    ) -> None:
        if reply is not None and reply.cost_usd is not None:
            self.costs.append(reply.cost_usd)
        self.steps.append(
            {
                "index": len(self.steps),
                "agent": agent,
                "role": role,
                "text": text,
                "tool_name": tool_name,
                "tool_args": json.dumps(tool_args, ensure_ascii=False) if tool_args is not None else None,
                "observation": observation,
                "fields": json.dumps(fields, ensure_ascii=False) if fields is not None else None,
                "prompt_tokens": reply.prompt_tokens if reply else 0,
                "completion_tokens": reply.completion_tokens if reply else 0,
                "latency_s": latency_s if latency_s is not None else (reply.latency_s if reply else 0.0),
                "error": error,
                "started_at": started_at or dt.datetime.now(dt.UTC),
            }
        )

    def history(self, limit: int) -> str:
        """A compact text of what happened (for the reflector and the verifier), newest kept."""
        lines = []
        for s in self.steps:
            if s["role"] == "plan":
                lines.append(f"[plan] {s['text']}")
            elif s["role"] == "think":
                lines.append(f"[{s['agent']} thought] {s['text']}")
            elif s["role"] in ("tool_call", "delegate"):
                arg = json.loads(s["tool_args"] or "{}")
                lines.append(f"[{s['agent']} -> {s['tool_name']}] {next(iter(arg.values()), '')}")
                lines.append(f"[result] {(s['observation'] or '')[:800]}")
            elif s["role"] == "reflection":
                lines.append(f"[reflection] {s['text']}")
        text = "\n".join(lines)
        return text if len(text) <= limit else "…" + text[-limit:]


class MultiAgentTeacher:
    """Solves tasks with a manager, a search agent, a code agent, a reflector and a verifier."""

    def __init__(self, backend: ModelBackend, tools: ToolBox, config: TeacherConfig | None = None) -> None:
        self.backend = backend
        self.tools = tools
        self.config = config or TeacherConfig()

    def teacher_config(self) -> dict[str, Any]:
        """What is recorded in each trajectory's ``teacher_config`` (never secrets)."""
        return {
            "teacher": self.config.model_dump(mode="json"),
            "backend": self.backend.name,
            "tools": list(self.tools.tools),
            "prompts": prompts.versions(),
        }

    async def solve(
        self, task: dict[str, Any], sample_index: int = 0, run_id: str | None = None
    ) -> dict[str, Any]:
        """Run the team on one ``task.v1`` row; always returns a ``trajectory.v1`` row.

        :class:`BudgetStop` propagates (after nothing is recorded for this run), so the collector
        stops cleanly and a resumed run redoes this task.
        """
        rec = Recorder()
        run_id = run_id or f"{task['task_id']}#{sample_index}"
        current_run_id.set(run_id)
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        status, error, answer = "completed", None, None
        try:
            answer = await asyncio.wait_for(self._run(task["question"], rec), self.config.wall_time_s)
        except TimeoutError:
            status, error = "time_limit", f"TimeLimit: task exceeded {self.config.wall_time_s:.0f} s"
        except TurnLimit as e:  # recorded as trajectory.v1 has always recorded it (status and error label)
            status, error = "step_limit", f"StepLimit: {e}"
        except ModelError as e:
            status, error = "error", str(e)
            rec.add("manager", "error", error=str(e))
        steps = rec.steps
        return {
            "run_id": run_id,
            "task_id": task["task_id"],
            "family": task["family"],
            "question": task["question"],
            "gold_answers": list(task.get("gold_answers") or []),
            "teacher": f"{self.config.name}/{self.backend.name}",
            "teacher_config": json.dumps(self.teacher_config(), sort_keys=True),
            "sample_index": sample_index,
            "steps": steps,
            "final_answer": answer,
            "correct": None,
            "status": status,
            "error": error,
            "n_steps": len(steps),
            "n_tool_calls": sum(1 for s in steps if s["role"] == "tool_call"),
            "prompt_tokens": sum(s["prompt_tokens"] for s in steps),
            "completion_tokens": sum(s["completion_tokens"] for s in steps),
            "cost_usd": sum(rec.costs) if rec.costs else None,
            "latency_s": time.perf_counter() - t0,
            "started_at": started,
            "finished_at": dt.datetime.now(dt.UTC),
        }

    # -- the manager loop ----------------------------------------------------------------------
    async def _run(self, question: str, rec: Recorder) -> str:
        cfg = self.config
        plan = await self._plan(question, rec, reason=None)
        messages = self._manager_messages(question, plan)
        for turn in range(cfg.max_steps):
            action, reply = await self._ask(
                "manager", messages, ("search_agent", "code_agent", "final_answer"), rec
            )
            rec.add("manager", "think", text=action.thought, reply=reply, fields={"action": action.name})
            if action.name == "final_answer":
                verdict = await self._verify(question, action.input, rec)
                if verdict >= cfg.min_verification_score:
                    return await self._finish(messages, reply, action.input, verdict, rec)
                plan = await self._plan(
                    question, rec, reason=f"verification score {verdict} for {action.input!r}"
                )
                messages = [
                    *self._manager_messages(question, plan),
                    *messages[2:],
                    {"role": "assistant", "content": reply.text},
                    {
                        "role": "user",
                        "content": f"Verification rejected the answer {action.input!r} (score {verdict}). "
                        "Follow the new plan.",
                    },
                ]
                continue
            started = dt.datetime.now(dt.UTC)
            t0 = time.perf_counter()
            report = await self._delegate(action.name, action.input, rec)
            rec.add(
                "manager",
                "delegate",
                text=action.input,
                tool_name=action.name,
                tool_args={"task": action.input},
                observation=report,
                latency_s=time.perf_counter() - t0,
                started_at=started,
            )
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": f"Observation from {action.name}:\n{report}"},
            ]
            done = turn + 1
            poor = False
            if cfg.reflect_every and done % cfg.reflect_every == 0:
                poor = await self._reflect(question, rec)
            if poor or (cfg.replan_every and done % cfg.replan_every == 0):
                plan = await self._plan(
                    question, rec, reason="a poor reflection grade" if poor else "scheduled re-plan"
                )
                messages = [*self._manager_messages(question, plan), *messages[2:]]
        raise TurnLimit(f"no verified answer after {cfg.max_steps} manager steps")

    async def _finish(
        self, messages: list[Message], reply: ModelReply, proposed: str, verdict: int, rec: Recorder
    ) -> str:
        """After a passing verification the manager states the final answer (its last thought)."""
        messages = [
            *messages,
            {"role": "assistant", "content": reply.text},
            {
                "role": "user",
                "content": f"Verification scored your answer {verdict} of 4. Give the final answer now.",
            },
        ]
        try:
            final, final_reply = await self._ask("manager", messages, ("final_answer",), rec)
        except ModelUnavailable:  # the endpoint failed: the run ends on infrastructure
            raise
        except ModelError:  # it could not restate it: the verified proposal stands
            rec.add("manager", "final_answer", text=proposed)
            return proposed
        rec.add("manager", "think", text=final.thought, reply=final_reply, fields={"action": "final_answer"})
        rec.add("manager", "final_answer", text=final.input)
        return final.input

    def _manager_messages(self, question: str, plan: str) -> list[Message]:
        return [
            {"role": "system", "content": prompts.render("manager", "step_system")},
            {"role": "user", "content": prompts.render("manager", "step_user", question=question, plan=plan)},
        ]

    async def _plan(self, question: str, rec: Recorder, reason: str | None) -> str:
        if reason is None:
            user = prompts.render("manager", "plan_user", question=question)
        else:
            history = rec.history(self.config.history_chars)
            user = prompts.render("manager", "replan_user", question=question, history=history, reason=reason)
        messages = [
            {"role": "system", "content": prompts.render("manager", "plan_system")},
            {"role": "user", "content": user},
        ]
        reply = await self._chat("manager", messages)
        try:
            parsed = parse_plan(reply.text)
        except ParseError as e:
            raise ModelError("AgentParsingError", f"manager plan: {e}") from None
        fields: dict[str, Any] = {"replan_reason": reason} if reason else {}
        if parsed.thought:
            fields["thought"] = parsed.thought
        rec.add("manager", "plan", text=parsed.plan, reply=reply, fields=fields or None)
        return parsed.plan

    async def _delegate(self, agent: str, task: str, rec: Recorder) -> str:
        role = "search_agent" if agent == "search_agent" else "code_agent"
        allowed = (
            (*(t for t in SEARCH_TOOLS if t in self.tools.tools), "final_answer")
            if agent == "search_agent"
            else (
                "code",
                "final_answer",
            )
        )
        messages: list[Message] = [
            {"role": "system", "content": prompts.render(role, "system")},
            {"role": "user", "content": prompts.render(role, "user", task=task)},
        ]
        for _ in range(self.config.max_agent_steps):
            try:
                action, reply = await self._ask(agent, messages, allowed, rec)
            except ModelUnavailable:  # the endpoint failed: the run ends on infrastructure
                raise
            except ModelError as e:  # a sub-agent that cannot answer in format aborts its delegation only
                return f"{agent} failed: {e}"
            if action.review:  # the agent's review of the last observation (a reflection step)
                rec.add(agent, "reflection", text=action.review, fields={"kind": "observation_review"})
            rec.add(agent, "think", text=action.thought, reply=reply, fields={"action": action.name})
            if action.name == "final_answer":
                return action.input
            started = dt.datetime.now(dt.UTC)
            result = await self.tools.call(action.name, action.input)
            key = "code" if action.name == "code" else ("url" if action.name == "crawl_page" else "query")
            rec.add(
                agent,
                "tool_call",
                text=action.input,
                tool_name=action.name,
                tool_args={key: action.input},
                observation=result.observation,
                latency_s=result.latency_s,
                error=result.error,
                started_at=started,
            )
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": f"Observation:\n{result.observation}"},
            ]
        return f"{agent} stopped after {self.config.max_agent_steps} steps without a report"

    async def _reflect(self, question: str, rec: Recorder) -> bool:
        history = rec.history(self.config.history_chars)
        messages = [
            {"role": "system", "content": prompts.render("reflection", "system")},
            {
                "role": "user",
                "content": prompts.render("reflection", "user", question=question, history=history),
            },
        ]
        reply = await self._chat("reflector", messages)
        try:
            reflection = parse_reflection(reply.text)
        except ParseError as e:
            rec.add("reflector", "error", text=reply.text, reply=reply, error=f"AgentParsingError: {e}")
            return False
        grades: dict[str, Any] = dict(reflection.grades)
        if reflection.thought:
            grades["thought"] = reflection.thought
        rec.add("reflector", "reflection", text=reflection.text, reply=reply, fields=grades)
        return reflection.poor

    async def _verify(self, question: str, answer: str, rec: Recorder) -> int:
        history = rec.history(self.config.history_chars)
        messages = [
            {"role": "system", "content": prompts.render("verification", "system")},
            {
                "role": "user",
                "content": prompts.render(
                    "verification", "user", question=question, history=history, answer=answer
                ),
            },
        ]
        reply = await self._chat("verifier", messages)
        try:
            verdict = parse_verification(reply.text)
        except ParseError as e:
            rec.add("verifier", "error", text=reply.text, reply=reply, error=f"AgentParsingError: {e}")
            return 1
        fields: dict[str, Any] = {"suggested_answer": verdict.suggested_answer, "score": verdict.score}
        if verdict.thought:
            fields["thought"] = verdict.thought
        rec.add("verifier", "verification", text=verdict.analysis, reply=reply, fields=fields)
        return verdict.score

    # -- model calls ---------------------------------------------------------------------------
    async def _chat(self, agent: str, messages: list[Message]) -> ModelReply:
        try:
            return await self.backend.chat(agent, messages)
        except (BudgetStop, ModelError):
            raise

    async def _ask(
        self, agent: str, messages: list[Message], allowed: tuple[str, ...], rec: Recorder
    ) -> tuple[Action, ModelReply]:
        """Ask until the reply parses as an allowed action; each bad reply is an error step."""
        attempt_messages = list(messages)
        for attempt in range(self.config.max_format_retries + 1):
            reply = await self._chat(agent, attempt_messages)
            try:
                if reply.finish_reason == "length":
                    raise ParseError("the reply was cut off at the token limit; answer more briefly")
                return parse_action(reply.text, allowed), reply
            except ParseError as e:
                rec.add(agent, "error", text=reply.text, reply=reply, error=f"AgentParsingError: {e}")
                if attempt == self.config.max_format_retries:
                    raise ModelError("AgentParsingError", f"{agent}: {e}") from None
                attempt_messages = [
                    *attempt_messages,
                    {"role": "assistant", "content": reply.text},
                    {"role": "user", "content": f"Error: {e}. Reply again in the required format."},
                ]
        raise AssertionError("unreachable")
