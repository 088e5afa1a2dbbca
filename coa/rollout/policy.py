"""What the rollout engine needs from a model: a tokenizer codec and token-in, token-out generation.

A :class:`Policy` continues a list of token ids and returns a :class:`Generation`: the ids exactly
as sampled (ending with the stop tag's or EOS's id when it stopped on one), one logprob per id, and
why it stopped. Generation stops after a closing tool tag or ``</answer>`` (:data:`STOP_TAGS`), at
an end-of-turn id, or at ``max_new_tokens``. Policies: Hugging Face ``generate``
(:mod:`~coa.rollout.policies.hf`), continuous batching in process
(:mod:`~coa.rollout.policies.hf_batched`), an OpenAI-compatible completions server
(:mod:`~coa.rollout.policies.endpoint`), a scripted mock (:mod:`~coa.rollout.policies.scripted`).
A :class:`WavePolicy` (HF ``generate``) also decodes a whole wave of requests in an order the wave
fixes, which the engine's ``lockstep`` schedule uses.

:class:`Codec` is the token side of the CoA format for one tokenizer: encode/decode without added
special tokens or clean-up (so ``decode`` of concatenated pieces is the concatenated text), the
stop ids, the end-of-turn ids and the chat prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from coa.format.segments import TOOL_TAGS
from coa.rollout.config import Sampling as Sampling  # its home: coa.rollout.config

if TYPE_CHECKING:
    from coa.rollout.episode import Episode

STOP_TAGS: tuple[str, ...] = tuple(f"</{t}>" for t in TOOL_TAGS) + ("</answer>",)
"""Generation pauses after these: a tool runs, or the episode is over."""

Finish = Literal["stop", "eos", "length"]


@dataclasses.dataclass(frozen=True)
class Generation:
    """One generation: sampled ids, their logprobs, and why it ended (``stop`` names the tag)."""

    ids: list[int]
    logprobs: list[float]
    finish: Finish
    stop: str | None = None
    version: int | None = None
    """The weight version the ids were sampled with, when the policy reports one (a server's
    ``weight_version``); a generation spanning an update names the oldest."""
    old_kv: bool = False
    """A weight push that keeps running requests' KV cache (vLLM ``pause?mode=keep``, SGLang
    ``in_place``) happened while it ran: later ids may be new weights over old-weight KV."""


class Codec:
    """Encode, decode, stop ids and chat prompt of one Hugging Face tokenizer."""

    def __init__(self, tokenizer: Any, extra_eos_ids: Iterable[int] = ()) -> None:
        self.tokenizer = tokenizer
        self._fast = getattr(tokenizer, "backend_tokenizer", None)  # the Rust tokenizer, no wrapper cost
        vocab = tokenizer.get_vocab()
        self.stop_ids: dict[int, str] = {vocab[t]: t for t in STOP_TAGS if t in vocab}
        self.single_token_stops = len(self.stop_ids) == len(STOP_TAGS)
        self.eos_id: int = int(tokenizer.eos_token_id)  # what a scripted reply or a closed episode ends with
        eos = {tokenizer.eos_token_id, *extra_eos_ids}
        self.eos_ids: frozenset[int] = frozenset(i for i in eos if i is not None)
        pad = tokenizer.pad_token_id
        self.pad_id: int = int(pad if pad is not None else tokenizer.eos_token_id)
        self.newline_ids: list[int] = self.encode("\n")
        """The newline that ends every canonical block (appended after each generation)."""

    @classmethod
    def from_pretrained(cls, name: str) -> Codec:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(name))

    def encode(self, text: str) -> list[int]:
        if self._fast is not None:
            return list(self._fast.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def decode(self, ids: Sequence[int]) -> str:
        if self._fast is not None:
            return str(self._fast.decode(list(ids), skip_special_tokens=False))
        return str(
            self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        )

    def chat_prompt(self, system: str, user: str) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return str(self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))

    def chat_prompt_ids(self, system: str, user: str) -> list[int]:
        return self.encode(self.chat_prompt(system, user))

    def cut(self, ids: Sequence[int], logprobs: Sequence[float], limit: int) -> Generation:
        """The generation that ``ids`` make: up to the first stop or EOS id, at most ``limit`` ids.

        A tokenizer without one token per stop tag is cut after the first id whose text completes a
        stop tag (that id is kept whole).
        """
        ids, logprobs = list(ids[:limit]), list(logprobs[:limit])
        for i, token in enumerate(ids):
            if token in self.stop_ids:
                return Generation(ids[: i + 1], logprobs[: i + 1], "stop", self.stop_ids[token])
            if token in self.eos_ids:
                return Generation(ids[: i + 1], logprobs[: i + 1], "eos")
        if not self.single_token_stops:
            for n in range(1, len(ids) + 1):
                text = self.decode(ids[max(0, n - 16) : n])  # a stop tag spans fewer than 16 ids
                tag = next((t for t in STOP_TAGS if t in text), None)
                if tag is not None:
                    return Generation(ids[:n], logprobs[:n], "stop", tag)
        return Generation(ids, logprobs, "length")


class Policy(Protocol):
    """A model the engine drives; ``start``/``stop`` bracket one engine run inside its event loop."""

    name: str
    codec: Codec

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation: ...


@runtime_checkable
class WavePolicy(Policy, Protocol):
    """A policy that decodes a whole wave of requests itself, in an order fixed by the wave (the
    engine's ``lockstep`` schedule): the same wave gives the same batches on every run."""

    async def generate_wave(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int], sampling: Sampling
    ) -> list[Generation]: ...


def model_text(episode: Episode, policy: Policy) -> str:
    """The episode's text without the end-of-turn token the model closed it with (when it did)."""
    if (
        episode.finish == "eos"
        and episode.completion_ids
        and episode.completion_ids[-1] in policy.codec.eos_ids
    ):
        return policy.codec.decode(episode.completion_ids[:-1])
    return episode.text
