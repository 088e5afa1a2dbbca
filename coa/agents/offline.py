"""The offline teacher: a rule-based backend that answers the agents' calls for the synthetic families.

It is what it says: not a model. It stands where an LLM would, reads the same prompts and
conversation, and writes replies in the same formats, so the whole collection path (agents, real
tools — the local search index and the sandboxed code tool — recording, checkpoints) runs with no
network and no model. It only knows the synthetic task families (:mod:`coa.synthetic`): it parses a
question with the family's template inverse and acts on the observations the tools really return
(it reads search results and program output; it never looks up a gold answer). On any other task
it raises ``ModelError("OfflineBackendUnsupported")``. The real teacher is any OpenAI-compatible
endpoint (:class:`coa.agents.llm_backend.EndpointBackend`).

To make the data look like a real teacher's, it makes seeded, recoverable slips: a typo in code
(the sandbox reports the error, it fixes it), a misspelled search (no results, it searches again),
a distractor picked as the answer (the verifier rejects it, the team re-plans). A small share of
slips survive verification, so curation has wrong answers to filter.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

from coa.agents import prompts
from coa.agents.backend import Message, ModelError, ModelReply, current_run_id
from coa.agents.config import OfflineConfig as OfflineConfig  # its home is coa.agents.config
from coa.agents.tokens import qwen_token_count
from coa.format.code import render_code
from coa.llm.tokens import estimate_prompt_tokens
from coa.synthetic import arithmetic, encyclopedia, multihop, programming


def _question(messages: list[Message], marker: str) -> str:
    text = messages[1]["content"]
    body = text.split(marker, 1)[1] if marker in text else text
    return body.strip()


def _identify(question: str) -> tuple[str, dict[str, Any]]:
    for name, module in (("arithmetic", arithmetic), ("multihop", multihop), ("programming", programming)):
        try:
            return name, module.parse_question(question)
        except ValueError:
            continue
    raise ModelError(
        "OfflineBackendUnsupported",
        "the offline rule-based teacher only answers the synthetic task families; "
        "configure an OpenAI-compatible endpoint (collect.backend=endpoint) for other tasks",
    )


def _act(thought: str, name: str, value: str, review: str | None = None) -> str:
    head = f"Review: {review}\n" if review else ""
    return f"{head}Thought: {thought}\nAction: {name}\nAction Input: {value}"


def _observations(messages: list[Message], prefix: str) -> list[str]:
    return [
        m["content"].split("\n", 1)[1] if "\n" in m["content"] else ""
        for m in messages[2:]
        if m["role"] == "user" and m["content"].startswith(prefix)
    ]


def _since_rejection(messages: list[Message]) -> list[Message]:
    """Messages after the last verification rejection (the team starts over after one)."""
    last = 0
    for i, m in enumerate(messages):
        if m["role"] == "user" and m["content"].startswith("Verification rejected"):
            last = i + 1
    return messages[:2] + messages[max(last, 2) :]


_ANSWER = re.compile(r"Answer:\s*(.+?)\s*\(evidence:", re.DOTALL)
_RESULT = re.compile(r"Result:\s*(-?\d+)")
_STDOUT = re.compile(r"\[STDOUT:BEGIN\]\n(.*?)\n\[STDOUT:END\]", re.DOTALL)
_FENCE = re.compile(r"```py\n.*?```", re.DOTALL)  # AFM's code format: ```py (coa.format.code)


class RuleBasedBackend:
    """Answers every agent role for the synthetic families, as an LLM would, from the conversation."""

    name = "offline-rule-based"

    def __init__(self, config: OfflineConfig | None = None) -> None:
        self.config = config or OfflineConfig()
        self._calls: dict[str | None, int] = {}

    async def chat(self, agent: str, messages: list[Message]) -> ModelReply:
        text = self.reply(agent, messages)
        run = current_run_id.get()
        self._calls[run] = self._calls.get(run, 0) + 1
        return ModelReply(
            text=text,
            prompt_tokens=estimate_prompt_tokens(messages, qwen_token_count),
            completion_tokens=qwen_token_count(text),
            latency_s=0.0,
        )

    # -- decisions ----------------------------------------------------------------------------
    def _rng(self, agent: str, messages: list[Message], salt: str = "") -> random.Random:
        run = current_run_id.get()
        call = self._calls.get(run, 0)  # a run's calls are sequential, so this stays deterministic
        key = f"{self.config.seed}|{run}|{call}|{agent}|{salt}|{messages[1]['content'][:200]}"
        return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))

    def _slip(self, agent: str, messages: list[Message], salt: str = "") -> bool:
        return self._rng(agent, messages, salt).random() < self.config.slip_rate

    def reply(self, agent: str, messages: list[Message]) -> str:
        system = messages[0]["content"]
        if agent == "manager" and system == prompts.render("manager", "plan_system"):
            return self._plan(messages)
        handlers = {
            "manager": self._manager,
            "search_agent": self._search_agent,
            "code_agent": self._code_agent,
            "reflector": self._reflect,
            "verifier": self._verify,
        }
        if agent not in handlers:
            raise ModelError("OfflineBackendUnsupported", f"no offline behaviour for agent {agent!r}")
        return handlers[agent](messages)

    # -- manager ------------------------------------------------------------------------------
    def _plan(self, messages: list[Message]) -> str:
        text = messages[1]["content"]
        question = text.split("Task:\n", 1)[1].split("\n\nWhat happened so far:", 1)[0].strip()
        family, s = _identify(question)
        replan = "What happened" in text
        if family == "arithmetic":
            # Terse on purpose: every token here is one a small student spends its steps on.
            thought = "Compute it exactly with code."
            steps = [
                "Expression: " + s["expression"] + ".",
                "Ask code_agent to print its value.",
                "Answer with the printed value.",
            ]
        elif family == "multihop":
            thought = (
                f"The question chains {len(s['relations'])} facts starting from {s['start']}; "
                "each fact needs its own search."
            )
            steps = [
                f"Ask search_agent: {multihop.hop_query(s['relations'][0], s['start'])}",
                *(
                    f"Ask search_agent for {multihop.noun_phrase('the previous answer', [rel])}."
                    for rel in s["relations"][1:]
                ),
                "Give the last entity found as the final answer.",
            ]
        else:
            thought = "This needs a complete program that reads standard input; it must be tested."
            steps = [
                "Ask code_agent to write a complete program for the task and test it on the example input.",
                "Give the tested program as the final answer.",
            ]
        if replan:
            thought = "The last attempt failed; start over and check every step. " + thought
        plan = "\n".join(f"{i}. {step}" for i, step in enumerate(steps, 1))
        return f"Thought: {thought}\nPlan:\n{plan}"

    def _manager(self, messages: list[Message]) -> str:
        question = messages[1]["content"].split("Task:\n", 1)[1].split("\n\nPlan:", 1)[0].strip()
        family, s = _identify(question)
        if messages[-1]["role"] == "user" and messages[-1]["content"].startswith("Verification scored"):
            proposed = messages[-2]["content"].split("Action Input:", 1)[1].strip()
            return _act("The verification confirms the answer.", "final_answer", proposed)
        live = _since_rejection(messages)
        if family == "arithmetic":
            reports = _observations(live, "Observation from code_agent")
            found = _RESULT.search(reports[-1]) if reports else None
            if found:
                # The value is in the report and goes into the answer; no third copy in the thought.
                return _act("code_agent reported the value.", "final_answer", found.group(1))
            thought = (
                "The last computation failed; ask again." if reports else "Evaluate the expression with code."
            )
            return _act(thought, "code_agent", f"Compute the value of {s['expression']} and print it.")
        if family == "multihop":
            reports = _observations(live, "Observation from search_agent")
            answers: list[str] = []  # the chain so far; two failed searches in a row cast doubt
            failed = 0  # on the hop before, which is then asked again (backtracking)
            for report in reports:
                found = _ANSWER.search(report)
                if found:
                    answers.append(found.group(1).strip())
                    failed = 0
                    continue
                failed += 1
                if failed >= 2 and answers:
                    answers.pop()
                    failed = 0
            hop = len(answers)
            if hop >= len(s["relations"]):
                return _act(f"The chain ends at {answers[-1]}.", "final_answer", answers[-1])
            subject = s["start"] if hop == 0 else answers[-1]
            query = multihop.hop_query(s["relations"][hop], subject, variant=failed % 2)
            thought = (
                f"Hop {hop + 1} of {len(s['relations'])}: start from {subject}."
                if not failed
                else f"The last search did not give an answer; ask differently about {subject}."
            )
            return _act(thought, "search_agent", query)
        reports = _observations(live, "Observation from code_agent")
        program = _FENCE.search(reports[-1]) if reports and "passed" in reports[-1] else None
        if program:
            return _act("The program passed the example.", "final_answer", program.group(0))
        return _act(
            "A program is needed; let code_agent write and test it.",
            "code_agent",
            f"Write a complete Python program for this task and test it on the example input.\n{question}",
        )

    # -- search agent -------------------------------------------------------------------------
    def _search_agent(self, messages: list[Message]) -> str:
        question = _question(messages, "Question from the manager:\n")
        parsed = multihop.parse_question(question)
        relation, subject = parsed["relations"][-1], parsed["start"]
        wanted = multihop.noun_phrase(subject, [relation])
        observations = _observations(messages, "Observation:")
        tool = self.config.search_tool
        if not observations:
            query = question
            if self._slip("search_agent", messages, "typo") and len(subject) > 4:
                cut = len(subject) // 2
                query = question.replace(subject, subject[:cut] + subject[cut + 1 :])
            return _act(f"Search for {wanted}.", tool, query)
        last = observations[-1]
        fact = self._find_fact(relation, subject, last)
        if fact is not None:
            obj, sentence = fact
            if self._slip("search_agent", messages, "distractor"):
                wrong = self._distractor(last, subject, obj)
                if wrong is not None:
                    return _act(
                        f"{wrong} is mentioned next to {subject}; that should be it.",
                        "final_answer",
                        f"Answer: {wrong} (evidence: {wrong})",
                        review=f"The results mention {subject} and {wrong}.",
                    )
            return _act(
                f"So {wanted} is {obj}.",
                "final_answer",
                f"Answer: {obj} (evidence: {sentence})",
                review=f"The result states: {sentence}",
            )
        if last.startswith(("No results", "No search results")):
            review = "The search returned no results; the query may be misspelled."
        elif last.startswith("Page "):
            review = f"The page does not state {wanted}."
        else:
            review = f"The results mention {subject} but the snippets do not state {wanted}."
        if len(observations) >= 4:
            return _act(
                "I could not find it.", "final_answer", "No answer found (evidence: none).", review=review
            )
        url = self._url_for(subject, last)
        crawled = any(o.startswith("Page ") for o in observations)
        if url is not None and not last.startswith(("No results", "Doc ", "Page ")) and not crawled:
            return _act(
                f"The page about {subject} should state it; read it.", "crawl_page", url, review=review
            )
        return _act(
            f"Search again for {wanted}, phrased differently.",
            tool,
            multihop.hop_query(relation, subject, variant=len(observations) % 2),
            review=review,
        )

    @staticmethod
    def _find_fact(relation: str, subject: str, text: str) -> tuple[str, str] | None:
        name = r"((?:the )?[A-Z][a-z]+(?: [A-Z][a-z]+)*)"
        for template in encyclopedia.RELATIONS[relation].sentences:
            pattern = (
                re.escape(template)
                .replace(re.escape("{s}"), re.escape(subject))
                .replace(re.escape("{o}"), name)
            )
            m = re.search(pattern, text)
            if m:
                obj = m.group(1)
                obj = obj[4:] if obj.startswith("the ") else obj
                return obj, m.group(0)
        return None

    @staticmethod
    def _distractor(text: str, subject: str, answer: str) -> str | None:
        snippets = "\n".join(
            line for line in text.splitlines() if not line.startswith(("Found ", "##", "local://", "Doc "))
        )
        names = re.findall(r"(?<=[a-z] )[A-Z][a-z]+(?: [A-Z][a-z]+)*", snippets)
        pool = [n for n in dict.fromkeys(names) if n not in subject and n not in answer and answer not in n]
        return pool[0] if pool else None

    @staticmethod
    def _url_for(subject: str, text: str) -> str | None:
        m = re.search(r"\[" + re.escape(subject) + r"\]\(([^)]+)\)", text)
        if m:
            return m.group(1)
        first = re.search(r"\]\(([^)]+)\)", text)
        return first.group(1) if first else None

    # -- code agent ---------------------------------------------------------------------------
    @staticmethod
    def _review_run(observation: str) -> tuple[str | None, str]:
        """(stdout if the program ran, a one-line review of the observation)."""
        out = _STDOUT.search(observation)
        if observation.startswith("[EXECUTED]"):
            stdout = out.group(1).strip() if out else ""
            return (
                stdout,
                f"The program ran and printed {stdout!r}." if stdout else "The program printed nothing.",
            )
        err = re.search(r"\[STDERR:BEGIN\]\n(.*?)\n\[STDERR:END\]", observation, re.DOTALL)
        last_line = (
            err.group(1).strip().splitlines()[-1] if err and err.group(1).strip() else "no error message"
        )
        return None, f"The program failed: {last_line}."

    def _code_agent(self, messages: list[Message]) -> str:
        task = _question(messages, "Sub-task from the manager:\n")
        observations = _observations(messages, "Observation:")
        stdout, review = self._review_run(observations[-1]) if observations else (None, None)
        m = re.match(r"Compute the value of (.+) and print it\.", task)
        if m:
            expression = m.group(1)
            if stdout is not None and re.fullmatch(r"-?\d+", stdout):
                # The result goes to the manager in the report; the thought need not copy it again.
                thought = "The program printed the value."
                return _act(thought, "final_answer", f"Result: {stdout}", review=review)
            code = f"result = {expression}\nprint(result)"
            if not observations and self._slip("code_agent", messages, "syntax"):
                code = f"result = {expression}\nprint(result"
            thought = "Fix the error and run again." if observations else "Evaluate the expression in Python."
            return _act(thought, "code", render_code(code), review=review)
        question = task.split("\n", 1)[1] if "\n" in task else task
        s = programming.parse_question(question)
        source = programming.reference_solution(s["spec"], s["params"]).strip()
        example_in = question.split("Example input:\n", 1)[1].split("\n\nExample output:", 1)[0]
        expected = question.split("Example output:\n", 1)[1].strip()
        if stdout is not None:
            verdict = "matches" if stdout == expected else "does not match"
            review = f"The program printed {stdout!r}, which {verdict} the example output {expected!r}."
            if stdout == expected:
                return _act(
                    "The program is correct on the example; hand it over.",
                    "final_answer",
                    f"The program passed the example.\n{render_code(source)}",
                    review=review,
                )
        body = source
        if not observations and self._slip("code_agent", messages, "syntax"):
            body = body.replace("print(", "print((", 1)
        thought = (
            "Fix the program and test again."
            if observations
            else "Write the program and test it on the example."
        )
        return _act(thought, "code", render_code(body, example_in), review=review)

    # -- reflection and verification ----------------------------------------------------------
    def _reflect(self, messages: list[Message]) -> str:
        history = messages[1]["content"].split("Progress so far:\n", 1)[-1]
        results = [line for line in history.splitlines() if line.startswith("[result]")]
        last = results[-1] if results else ""
        failed = any(k in last for k in ("[FAILED]", "No results", "No answer found", "Error", "failed"))
        delegations = sum(
            1 for line in history.splitlines() if "-> search_agent]" in line or "-> code_agent]" in line
        )
        tool = "poor" if failed else "good"
        monitoring = "average" if delegations > 4 else "good"
        note = (
            "The last tool call did not deliver what was needed; change the approach."
            if failed
            else "The results so far are consistent and move toward the answer."
        )
        thought = f"{len(results)} tool result(s) so far; the last one {'failed' if failed else 'worked'}."
        return (
            f"Thought: {thought}\n"
            f"Information Conflict: good\nTool Effectiveness: {tool}\nTrajectory Monitoring: {monitoring}\n"
            f"Reflection: {note}"
        )

    def _verify(self, messages: list[Message]) -> str:
        text = messages[1]["content"]
        question = text.split("Task:\n", 1)[1].split("\n\nEvidence:", 1)[0].strip()
        evidence = text.split("Evidence:\n", 1)[1].split("\n\nProposed answer:", 1)[0]
        answer = text.split("Proposed answer:\n", 1)[1].strip()
        family, s = _identify(question)
        checks = {
            "arithmetic": "Check that an exact computation printed this value.",
            "multihop": "Check that every hop of the chain is stated in a retrieved document.",
            "programming": "Check that the program was run on the example and matched it.",
        }
        if family == "arithmetic":
            ok = f"Result: {answer}" in evidence or f"\n{answer}\n" in evidence
            why = "the printed result of the exact computation" if ok else "no computation printed this value"
        elif family == "multihop":
            ok = f"Answer: {answer} (evidence:" in evidence and self._supported(s, answer, evidence)
            why = (
                "each hop is stated in a retrieved document"
                if ok
                else "the last hop is not supported by a document"
            )
        else:
            ok = "passed the example" in evidence or "```py\n" in answer
            why = "the program ran and matched the example" if ok else "the program was not tested"
        if not ok and self._rng("verifier", messages, "miss").random() < self.config.verifier_miss_rate:
            ok, why = True, "it looks plausible"
        score = 4 if ok else 2
        shown = answer if "\n" not in answer else "the proposed program"
        return f"Thought: {checks[family]}\nSuggested Answer: {shown}\nScore: {score}\nAnalysis: {why}."

    def _supported(self, s: dict[str, Any], answer: str, evidence: str) -> bool:
        relation = s["relations"][-1]
        claims = re.findall(r"Answer: (.+?) \(evidence: (.+?)\)", evidence)
        for claimed, sentence in claims:
            if claimed != answer:
                continue
            for template in encyclopedia.RELATIONS[relation].sentences:
                pattern = (
                    re.escape(template)
                    .replace(re.escape("{s}"), r".+")
                    .replace(re.escape("{o}"), re.escape(answer))
                )
                if re.search(pattern, sentence):
                    return True
        return False
