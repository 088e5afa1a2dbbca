"""coa.rollout: one async, token-level rollout engine for evaluation and RL.

* :mod:`~coa.rollout.episode`: :class:`Episode` (prompt ids, completion ids as sampled, logprobs,
  loss mask, text, tool calls, finish, timings);
* :mod:`~coa.rollout.policy`: the :class:`Policy` protocol, :class:`Codec` (tokenizer side of the
  format), :class:`Sampling`, :class:`Generation`;
* :mod:`~coa.rollout.config`: :class:`RolloutLimits` (declared once, embedded by evaluation and RL)
  and :class:`RolloutConfig`;
* :mod:`~coa.rollout.engine`: :func:`run_episodes` / :func:`rollout` (every episode its own task,
  tools overlapping generation, under a concurrency bound);
* :mod:`~coa.rollout.policies`: HF ``generate`` (micro-batched), continuous batching in process
  (``hf_batched``), a completions server (vLLM or ``python -m coa.serve``), a script.
"""

from typing import TYPE_CHECKING, Any

from coa.rollout.config import GREEDY, RolloutConfig, RolloutLimits, Sampling

if TYPE_CHECKING:
    from coa.rollout.engine import EpisodeSpec, rollout, run_episode, run_episodes, run_sync
from coa.rollout.episode import Episode, ToolCall
from coa.rollout.policy import STOP_TAGS, Codec, Generation, Policy, model_text

__all__ = [
    "GREEDY",
    "STOP_TAGS",
    "Codec",
    "Episode",
    "EpisodeSpec",
    "Generation",
    "Policy",
    "RolloutConfig",
    "RolloutLimits",
    "Sampling",
    "ToolCall",
    "model_text",
    "rollout",
    "run_episode",
    "run_episodes",
    "run_sync",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in ("EpisodeSpec", "rollout", "run_episode", "run_episodes", "run_sync"):
        from coa.rollout import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
