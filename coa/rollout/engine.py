"""The rollout engine: every episode advances on its own (or the live ones in waves, ``lockstep``).

Each episode is an asyncio task under a concurrency bound (a semaphore), so there is no batch
barrier: an episode waiting on a slow tool holds up nobody (a policy that batches, like HF
``generate``, batches whatever requests are waiting). One turn of an episode:

1. stop at the token budget (``max_total_tokens`` generated), else generate at most
   ``min(max_new_tokens, budget left)`` ids from ``prompt_ids + completion_ids``; they are kept as
   sampled (mask 1);
2. a generation that writes an environment tag (``<observation>``) ends the episode as a format
   error and runs no tool; so do EOS (``eos``, no error) and running out of tokens;
3. otherwise it stopped on a closing tag: the newline that ends a canonical block is appended
   (environment); ``</answer>`` ends the episode; a tool tag is parsed through the format module
   (text that does not parse, or a tag that closes another block, is a format error, no tool run),
   the tool runs through the toolbox, and its observation is appended as the ids of
   ``render_segment(Segment("observation", ...))`` encoded on its own (environment).

After ``max_turns`` generations without an end the episode stops at the turn limit.

Two schedules (``schedule``), the same episodes' semantics token for token. ``async`` (above): no
barrier, so a batching policy's batches, and the ids sampled in them, follow the timing of tools and
requests. ``lockstep``: waves; every live episode asks for its next generation, the policy decodes
the wave (a :class:`~coa.rollout.policy.WavePolicy` in an order the wave fixes), then the wave's tool
calls run together, then finished episodes make room for the next specs in order. Nothing depends on
timing, so with a wave policy (HF ``generate``) and seeded sampling a run repeats token for token on
one machine; the price is that a slow tool holds up its wave. ``auto`` is lockstep for a wave policy,
async otherwise.

AFM-comparable options (:class:`~coa.rollout.config.RolloutConfig`): ``duplicate_calls: refuse``
(default) does not run a search or crawl call identical to an earlier one of the episode and
answers with a canned observation, as AFM's rollouts do; ``max_context_tokens`` cuts what the policy
sees, keeping the prompt, the pieces that hold a plan or a reflection and the most recent pieces that
fit, as AFM's web-agent evaluation keeps its plan and reflection blocks (it cuts at block level; the
engine at the level of its pieces: one generation, one observation).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from coa.format import FormatError, Segment, parse
from coa.format.codec import render_segment
from coa.format.segments import ENV_TAGS, TOOL_TAGS
from coa.rollout.config import RolloutConfig
from coa.rollout.episode import Episode, ToolCall
from coa.rollout.policy import Codec, Generation, Policy, Sampling, WavePolicy

FORGED_RE = re.compile("|".join(f"</?{t}>" for t in ENV_TAGS))
_T = TypeVar("_T")
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EpisodeSpec:
    """What to run: a task's prompt ids, and which of its samples this is."""

    task_id: str
    prompt_ids: Sequence[int]
    sample_index: int = 0


async def run_episode(spec: EpisodeSpec, policy: Policy, toolbox: Any, config: RolloutConfig) -> Episode:
    """Drive one episode to its end."""
    codec, sampling = policy.codec, config.sampling()
    episode = begin(spec)
    for _ in range(config.max_turns):
        budget = next_budget(episode, config)
        if budget is None:
            break
        start = time.perf_counter()
        generation = await policy.generate(context(episode, codec, config, budget), budget, sampling)
        episode.generation_s += time.perf_counter() - start
        episode.policy_versions.append(generation.version)
        episode.old_kv |= generation.old_kv
        call = advance(episode, generation, codec, config)
        if call is None:
            break
        await call_tool(episode, toolbox, codec, *call, config)
    return close(episode, codec, config)


def begin(spec: EpisodeSpec) -> Episode:
    """A new episode of ``spec``, started now."""
    return Episode(spec.task_id, spec.sample_index, list(spec.prompt_ids), started_at=time.perf_counter())


def context(episode: Episode, codec: Codec, config: RolloutConfig, budget: int) -> list[int]:
    """The ids the policy continues from: prompt + completion, cut to ``max_context_tokens`` if set.

    The cut keeps the prompt, every piece holding a ``<plan>`` or ``<reflection>``, then the most
    recent other pieces that fit; the episode's own record is never cut.
    """
    full = episode.prompt_ids + episode.completion_ids
    limit = config.max_context_tokens
    if limit is None or len(full) + budget <= limit:
        return full
    room = limit - budget - len(episode.prompt_ids)
    pieces = [episode.completion_ids[a:b] for a, b in episode.pieces]
    keep = [any(tag in codec.decode(ids) for tag in _KEPT_TAGS) for ids in pieces]
    room -= sum(len(ids) for ids, kept in zip(pieces, keep, strict=True) if kept)
    for i in range(len(pieces) - 1, -1, -1):
        if not keep[i] and len(pieces[i]) <= room:
            keep[i], room = True, room - len(pieces[i])
        elif not keep[i]:
            break  # the most recent ones only: no gaps filled with older pieces
    episode.context_cuts += 1
    return episode.prompt_ids + [t for ids, kept in zip(pieces, keep, strict=True) if kept for t in ids]


_KEPT_TAGS = ("<plan>", "<reflection>")
GUARDED_TOOLS = frozenset({"web_search", "wiki_search", "crawl_page"})
DUPLICATE_OBSERVATION = {
    "crawl_page": "I have crawled this URL before; its content is above. Use it, or crawl another page.",
}
DUPLICATE_SEARCH = (
    "I have performed a search with the same query before; its results are above. Search differently."
)


def next_budget(episode: Episode, config: RolloutConfig) -> int | None:
    """Tokens the next generation may produce; None (and the episode ended) at the total budget."""
    if episode.completion_tokens >= config.max_total_tokens:
        episode.end("token_limit", f"token limit: {config.max_total_tokens} generated tokens")
        return None
    return min(config.max_new_tokens, config.max_total_tokens - episode.completion_tokens)


def advance(
    episode: Episode, generation: Generation, codec: Codec, config: RolloutConfig
) -> tuple[str, str] | None:
    """Append one generation; the tool call ``(tool, argument)`` to run, or None when the episode ended."""
    episode.turns += 1
    episode.add_sampled(generation.ids, generation.logprobs)
    forged = FORGED_RE.search(codec.decode(generation.ids))
    if forged is not None:
        episode.format_error = (
            f"forged_observation: the model wrote {forged.group(0)!r} itself (no tool was run)"
        )
        episode.end("format_error", "format error")
        return None
    if generation.finish == "eos":
        episode.end("eos")
        return None
    if generation.finish == "length":
        if episode.completion_tokens >= config.max_total_tokens:
            episode.end("token_limit", f"token limit: {config.max_total_tokens} generated tokens")
        else:
            episode.end(
                "generation_limit", f"generation limit: {config.max_new_tokens} tokens without a closing tag"
            )
        return None
    episode.add_environment(codec.newline_ids)  # the canonical rendering ends every block with a newline
    if generation.stop == "</answer>":
        episode.end("answer")
        if config.close_with_eos:
            episode.add_environment([codec.eos_id])
        return None
    call = _tool_call(codec.decode(episode.completion_ids), generation.stop)
    if isinstance(call, str):
        episode.format_error = call
        episode.end("format_error", "format error")
        return None
    return call


def _tool_call(text: str, stop: str | None) -> tuple[str, str] | str:
    """The ``(tool, argument)`` the text's last block calls, else the format error (no tool is run)."""
    try:
        last = parse(text, strict=False).segments[-1]
    except (FormatError, IndexError) as e:
        return f"{getattr(e, 'rule', 'layout')}: {e} (the tool call was not run)"
    if last.tag not in TOOL_TAGS:
        return f"layout: {stop} closes <{last.tag}> (the tool call was not run)"
    return last.tag, last.content


async def call_tool(
    episode: Episode,
    toolbox: Any,
    codec: Codec,
    tool: str,
    argument: str,
    config: RolloutConfig | None = None,
) -> None:
    """Run the tool and append its observation, rendered canonically and encoded on its own.

    A search or crawl repeating an earlier call of the episode is refused with a canned observation
    when ``config.duplicate_calls`` is ``refuse`` (AFM's guard); it is not run and not counted.
    """
    if config is not None and config.duplicate_calls == "refuse" and tool in GUARDED_TOOLS:
        asked = " ".join(argument.split())
        if any(c.tool == tool and " ".join(c.argument.split()) == asked for c in episode.tool_calls):
            episode.duplicate_calls += 1
            text = DUPLICATE_OBSERVATION.get(tool, DUPLICATE_SEARCH)
            episode.add_environment(codec.encode(render_segment(Segment("observation", text))))
            return
    start = time.perf_counter()
    result = await toolbox.call(tool, argument)
    seconds = time.perf_counter() - start
    episode.tool_s += seconds
    episode.tool_calls.append(ToolCall(tool, argument, result.error, seconds, start))
    observation = render_segment(Segment("observation", str(result.observation or "(no output)")))
    episode.add_environment(codec.encode(observation))


def close(episode: Episode, codec: Codec, config: RolloutConfig) -> Episode:
    """End an episode still running at the turn limit; set its text and end time."""
    if episode.finish is None:
        episode.end("turn_limit", f"turn limit: {config.max_turns} generations without an answer")
    episode.text = codec.decode(episode.completion_ids)
    episode.ended_at = time.perf_counter()
    return episode


async def run_episodes(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    toolbox: Any,
    config: RolloutConfig,
    progress: Progress | None = None,
) -> list[Episode]:
    """Run every episode, at most ``config.concurrency`` at once; episodes in the order of ``specs``.

    Under the ``lockstep`` schedule (``auto`` with a :class:`WavePolicy`) see :func:`run_waves`.
    Otherwise ``concurrency`` workers each take the next spec as soon as their episode ends (the same start
    order as a semaphore over one task per spec, without a waiter per spec: at thousands of specs
    the semaphore's wake-ups scanned its waiter queue on every release). A policy error (an
    unreachable server) cancels the others and is raised.
    """
    if lockstep(policy, config):
        return await run_waves(specs, policy, toolbox, config, progress)
    episodes: list[Episode | None] = [None] * len(specs)
    queue = iter(range(len(specs)))  # shared by the workers (one thread: next() is atomic)
    done = 0

    async def worker() -> None:
        nonlocal done
        for i in queue:
            episodes[i] = await run_episode(specs[i], policy, toolbox, config)
            done += 1
            if progress is not None:
                progress(done, len(specs))

    await policy.start()
    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(config.concurrency, len(specs))):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # the first failure, as it was raised
    finally:
        await policy.stop()
    return _all_ran(episodes)


def _all_ran(episodes: list[Episode | None]) -> list[Episode]:
    finished = [e for e in episodes if e is not None]
    if len(finished) != len(episodes):
        raise RuntimeError(f"{len(episodes) - len(finished)} episodes never ran")  # a bug, never a short list
    return finished


def lockstep(policy: Policy, config: RolloutConfig) -> bool:
    """Whether ``config.schedule`` runs ``policy`` in waves (``auto``: when it is a wave policy)."""
    return config.schedule == "lockstep" or (config.schedule == "auto" and isinstance(policy, WavePolicy))


async def run_waves(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    toolbox: Any,
    config: RolloutConfig,
    progress: Progress | None = None,
) -> list[Episode]:
    """Every episode in waves of the live ones (at most ``config.concurrency``), in the order of ``specs``.

    A wave: each live episode (in spec order) past its limits is closed, the others ask for their
    next generation; the policy decodes the wave (:func:`generate_wave`); each generation is appended
    (:func:`advance`) and the tool calls it asks for run together; the ended episodes are closed and
    the next specs, in order, take their places. The token-level semantics are :func:`run_episode`'s.
    """
    codec, sampling = policy.codec, config.sampling()
    episodes: list[Episode | None] = [None] * len(specs)
    waiting = iter(range(len(specs)))
    live: dict[int, Episode] = {}  # spec index -> episode, in spec order (later specs join at the end)
    done = 0

    def finish(i: int) -> None:
        nonlocal done
        episodes[i] = close(live.pop(i), codec, config)
        done += 1
        if progress is not None:
            progress(done, len(specs))

    def join() -> None:
        for i in itertools.islice(waiting, config.concurrency - len(live)):
            live[i] = begin(specs[i])

    await policy.start()
    try:
        join()
        while live:
            asks: list[tuple[int, int]] = []
            for i, episode in list(live.items()):
                budget = next_budget(episode, config) if episode.turns < config.max_turns else None
                if budget is None:
                    finish(i)
                else:
                    asks.append((i, budget))
            if asks:
                contexts = [context(live[i], codec, config, budget) for i, budget in asks]
                start = time.perf_counter()
                generations = await generate_wave(policy, contexts, [b for _, b in asks], sampling)
                seconds = time.perf_counter() - start
                calls = []
                for (i, _), generation in zip(asks, generations, strict=True):
                    episode = live[i]
                    episode.generation_s += seconds
                    episode.policy_versions.append(generation.version)
                    episode.old_kv |= generation.old_kv
                    call = advance(episode, generation, codec, config)
                    if call is None:
                        finish(i)
                    else:
                        calls.append(call_tool(episode, toolbox, codec, *call, config))
                await asyncio.gather(*calls)
            join()
    finally:
        await policy.stop()
    return _all_ran(episodes)


async def generate_wave(
    policy: Policy, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], sampling: Sampling
) -> list[Generation]:
    """One generation per prompt, in order: the policy's own wave decoding if it has one, else its
    requests all at once (their batching is then the policy's)."""
    if isinstance(policy, WavePolicy):
        return await policy.generate_wave(prompts, max_new_tokens, sampling)
    generations = await asyncio.gather(
        *(policy.generate(p, n, sampling) for p, n in zip(prompts, max_new_tokens, strict=True))
    )
    return list(generations)


def rollout(
    specs: Sequence[EpisodeSpec],
    policy: Policy,
    toolbox: Any,
    config: RolloutConfig,
    progress: Progress | None = None,
) -> list[Episode]:
    """:func:`run_episodes` from sync code."""
    return run_sync(lambda: run_episodes(specs, policy, toolbox, config, progress))


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
