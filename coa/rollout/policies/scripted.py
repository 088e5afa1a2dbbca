"""A scripted policy for tests and benchmarks: replies written as text, returned as ids after a delay.

Each task has a list of replies, one per turn; a reply is picked by a key found in the decoded
prompt (the task's question) and by the turn, which is the number of observations already in the
prompt (every continuing turn adds exactly one), so several samples of a task can run at once.
A reply is encoded with the policy's tokenizer and cut like a real generation
(:meth:`Codec.cut`): at its stop tag, at the token budget, or it ends with EOS (appended when the
text ends without a stop tag). Logprobs are a fixed ``logprob`` per id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from coa.rollout.policy import Codec, Generation, Sampling


class ScriptedPolicy:
    """Replies per key, one per turn; records every request ``(prompt ids, budget)``."""

    def __init__(
        self,
        codec: Codec,
        replies: Mapping[str, Sequence[str]],
        *,
        latency_s: float | Mapping[str, float] = 0.0,
        logprob: float = -0.5,
        name: str = "scripted",
    ) -> None:
        self.codec = codec
        self.name = name
        self.replies = {key: list(texts) for key, texts in replies.items()}
        self.latency_s = latency_s
        self.logprob = logprob
        self.requests: list[tuple[list[int], int]] = []

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        self.requests.append((list(prompt_ids), max_new_tokens))
        prompt = self.codec.decode(prompt_ids)
        key = next((k for k in self.replies if k in prompt), None)
        if key is None:
            raise KeyError(f"no scripted reply for a prompt ending {prompt[-80:]!r}")
        turn = prompt.count("</observation>")  # observations are escaped: only real ones are live tags
        text = self.replies[key][min(turn, len(self.replies[key]) - 1)]
        delay = self.latency_s if isinstance(self.latency_s, float | int) else self.latency_s.get(key, 0.0)
        if delay > 0:
            await asyncio.sleep(delay)
        ids = self.codec.encode(text)
        if not any(id_ in self.codec.stop_ids for id_ in ids):
            ids.append(self.codec.eos_id)
        return self.codec.cut(ids, [self.logprob] * len(ids), max_new_tokens)
