"""The CoA inference loop: generate, run the tool a closing tag calls, append its observation, go on.

One :class:`CoaRun` per task. Every round, all unfinished runs go through the generator together
(in chunks of ``batch_size``). A generation that stops on a closing tool tag is parsed through the
format module; its tool runs through the agents' toolbox (the sandbox for code, the configured
search and crawl providers) and the observation is appended exactly as training data renders it
(:func:`coa.format.codec.render_segment`, escaped). A run ends on ``</answer>``, at the end of the
model's turn, or at a limit (``max_turns`` generations, ``max_total_tokens`` generated tokens).

A model never writes an observation itself: a generation that contains an ``<observation>`` tag
ends the run as a format error and its tool is not executed. Neither is the tool of a text that
does not parse.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from coa.evaluate.generation import Completion, Generator
from coa.format import FormatError, Segment, parse
from coa.format.codec import render_segment
from coa.format.segments import ENV_TAGS, TOOL_TAGS

_T = TypeVar("_T")
FORGED_RE = re.compile("|".join(f"</?{t}>" for t in ENV_TAGS))


@dataclasses.dataclass
class CoaRun:
    """The state of one task's run."""

    task_id: str
    variant: str
    prompt: str
    text: str = ""
    turns: int = 0
    tool_calls: int = 0
    completion_tokens: int = 0
    done: bool = False
    error: str | None = None
    format_error: str | None = None
    tool_errors: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class LoopLimits:
    max_turns: int
    max_new_tokens: int
    max_total_tokens: int
    batch_size: int


def run_sync(make: Callable[[], Awaitable[_T]]) -> _T:
    """Run a coroutine to completion from sync code, also when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())  # type: ignore[arg-type]
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def run_loop(
    runs: Sequence[CoaRun],
    generator: Generator,
    toolbox: Any,
    limits: LoopLimits,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Drive every run to its end (in place)."""
    for _ in range(limits.max_turns):
        for run in runs:
            if not run.done and run.completion_tokens >= limits.max_total_tokens:
                run.done, run.error = True, f"token limit: {limits.max_total_tokens} generated tokens"
                if progress is not None:
                    progress(1)
        active = [r for r in runs if not r.done]
        if not active:
            break
        for start in range(0, len(active), limits.batch_size):
            chunk = active[start : start + limits.batch_size]
            budgets = [
                min(limits.max_new_tokens, limits.max_total_tokens - r.completion_tokens) for r in chunk
            ]
            completions = generator.generate([r.prompt + r.text for r in chunk], budgets)
            calls = [advance(r, c, limits) for r, c in zip(chunk, completions, strict=True)]
            pending = [(r, call) for r, call in zip(chunk, calls, strict=True) if call is not None]
            if pending:
                results = run_sync(partial(_call_tools, toolbox, [call for _, call in pending]))
                for (run, _), result in zip(pending, results, strict=True):
                    _observe(run, result)
            if progress is not None:
                progress(sum(r.done for r in chunk))
    for run in runs:
        if not run.done:
            run.done, run.error = True, f"turn limit: {limits.max_turns} generations without an answer"
            if progress is not None:
                progress(1)


def advance(run: CoaRun, completion: Completion, limits: LoopLimits) -> tuple[str, str] | None:
    """Append one generation; return the tool call ``(tool, argument)`` to execute, if any."""
    run.turns += 1
    run.completion_tokens += completion.n_tokens
    run.text += completion.text
    forged = FORGED_RE.search(completion.text)
    if forged is not None:
        run.done = True
        run.format_error = f"forged_observation: the model wrote {forged.group(0)!r} itself (no tool was run)"
        run.error = "format error"
        return None
    if completion.reason == "eos":
        run.done = True
        return None
    if completion.reason == "length":
        run.done = True
        if run.completion_tokens >= limits.max_total_tokens:
            run.error = f"token limit: {limits.max_total_tokens} generated tokens"
        else:
            run.error = f"generation limit: {limits.max_new_tokens} tokens without a closing tag"
        return None
    run.text += "\n"  # the canonical rendering ends every block with a newline
    if completion.stop == "</answer>":
        run.done = True
        return None
    try:
        last = parse(run.text, strict=False).segments[-1]
    except (FormatError, IndexError) as e:
        run.done, run.error = True, "format error"
        run.format_error = f"{getattr(e, 'rule', 'layout')}: {e} (the tool call was not run)"
        return None
    if last.tag not in TOOL_TAGS:
        run.done, run.error = True, "format error"
        run.format_error = f"layout: {completion.stop} closes <{last.tag}> (the tool call was not run)"
        return None
    return last.tag, last.content


async def _call_tools(toolbox: Any, calls: Sequence[tuple[str, str]]) -> list[Any]:
    return list(await asyncio.gather(*(toolbox.call(tool, argument) for tool, argument in calls)))


def _observe(run: CoaRun, result: Any) -> None:
    run.tool_calls += 1
    if result.error:
        run.tool_errors.append(result.error)
    run.text += render_segment(Segment("observation", result.observation or "(no output)"))
