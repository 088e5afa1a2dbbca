"""One generation batch of RL rollouts: episodes from the rollout engine, rewards, dynamic sampling.

:class:`RolloutSource` turns the prompt ids TRL's sampler picked for a generation batch (each
repeated ``group_size`` times, consecutively) into the batch the trainer trains on:

1. ``group_size`` episodes per prompt through :mod:`coa.rollout` (the token ids exactly as sampled,
   observations and the environment's newlines and end-of-turn with mask 0);
2. each episode scored (:mod:`coa.rl.rewards`);
3. **dynamic sampling** (DAPO): a group whose total rewards are all equal has zero advantage and
   is dropped; the batch is refilled from further prompts (drawn by a generator seeded from the
   step and the rank, each rank from its own share of the prompts, so a resumed run draws the
   same) for up to ``max_refill_rounds`` rounds, and none once
   the run's time budget has run out (``deadline``: a refill round of a weak policy can cost more
   than the whole budget); a batch still short is topped up with dropped groups, and the shortfall
   is logged. Whether a round starts is a :data:`RefillDecision`: on several ranks every rank takes
   part in each round's decision, made from rank 0's clock (:func:`coa.rl.ranks.refill_decision`),
   so the ranks never disagree on the deadline;
4. truncated episodes (a token, turn or generation limit) get an all-zero mask when
   ``mask_truncated`` (overlong filtering): they are kept for the group baseline but trained on
   nowhere.

Every episode, kept or dropped, becomes a ``rollout.v1`` row, with the policy version it was
sampled with (the oldest its generations report: a server's ``weight_version``, or the trainer's
step for the in-process backends) and its behaviour logprobs (null on environment ids).

A batch's metrics are kept as :func:`batch_tallies` (counts, sums and maxima): the ranks' tallies
add up (:func:`pool_tallies`) before :func:`stats_of` turns them into shares and means, so a metric
of several ranks is the batch's, never a mean of the ranks' means.

The asynchronous mode's producer (:mod:`coa.rl.producer`) makes groups one by one with
:meth:`RolloutSource.score_group` and picks a batch from them itself.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coa.rl.config import RLStageConfig
from coa.rl.rewards import TERMS, Reward, decode_completion, score_episodes
from coa.rollout import Codec, Episode, EpisodeSpec, Policy, RolloutConfig, rollout

TRUNCATED = frozenset({"generation_limit", "token_limit", "turn_limit"})
"""Episode endings that are cut by a limit rather than chosen by the model."""

RefillDecision = Callable[[int, int, bool, bool], bool]
"""``decide(step, round, wanted, open)``: whether refill round ``round`` of ``step``'s batch starts, given
whether this rank wants one (it is short of groups and has prompts left) and whether its clock says
the deadline has not passed. One process: :func:`own_decision`; several ranks: every rank calls it
once per round until it says no (a collective, :func:`coa.rl.ranks.refill_decision`)."""


def own_decision(step: int, round_: int, wanted: bool, open_: bool) -> bool:
    """One rank alone: a round starts when it is wanted and the deadline has not passed."""
    return wanted and open_


@dataclasses.dataclass
class Group:
    """The episodes of one prompt and their rewards."""

    prompt_id: str
    task_id: str
    group_index: int
    variant: str
    episodes: list[Episode]
    rewards: list[Reward]
    draw: int | None = None
    """The async producer's draw it was generated for (:mod:`coa.rl.producer`); None in sync mode."""

    @property
    def zero_variance(self) -> bool:
        totals = [r.total for r in self.rewards]
        return max(totals) - min(totals) < 1e-9

    def version(self, default: int) -> int:
        """The oldest policy version any of its generations was sampled with (``default`` when the
        policy reports none: the in-process backends sample with the trainer's current weights)."""
        return min((episode_version(e, default) for e in self.episodes), default=default)


def episode_version(episode: Episode, default: int) -> int:
    """The oldest weight version the episode's generations report, else ``default``."""
    return min((v for v in episode.policy_versions if v is not None), default=default)


@dataclasses.dataclass
class RolloutBatch:
    """What one call returns: the trained groups (in order) and the stats and rows of all episodes."""

    groups: list[Group]
    rows: list[dict[str, Any]]
    stats: dict[str, float]
    tallies: dict[str, float] = dataclasses.field(default_factory=dict)
    """What ``stats`` were computed from (:func:`batch_tallies`), for pooling over ranks."""


def rollout_config(params: RLStageConfig, greedy: bool = False) -> RolloutConfig:
    """Sampled episodes under the run's limits (greedy ones for the held-out score); EOS closes an
    answer so TRL sees it finished."""
    return RolloutConfig(
        **params.limits(),
        concurrency=max(1, 2 * params.episodes_per_generation),
        temperature=0.0 if greedy else params.temperature,
        top_p=1.0,
        top_k=0,
        close_with_eos=True,
    )


def train_mask(episode: Episode, mask_truncated: bool) -> list[int]:
    """The loss mask TRL gets: the episode's own (1 = sampled), all 0 for a truncated episode."""
    if mask_truncated and episode.finish in TRUNCATED:
        return [0] * len(episode.mask)
    return list(episode.mask)


class RolloutSource:
    """Rollouts and rewards for the prompts of an ``rl_prompt.v1`` table."""

    def __init__(
        self,
        prompts: Sequence[Mapping[str, Any]],
        params: RLStageConfig,
        toolbox: Any,
        judge: Any = None,
        greedy: bool = False,
    ) -> None:
        if not prompts:
            raise ValueError("no RL prompts")
        self.prompts = {str(p["prompt_id"]): dict(p) for p in prompts}
        self.order = sorted(self.prompts)
        self.params = params
        self.toolbox = toolbox
        self.judge = judge
        self.config = rollout_config(params, greedy)
        self._prompt_ids: dict[str, list[int]] = {}

    def prompt_ids(self, prompt_id: str, codec: Codec) -> list[int]:
        """The prompt's chat rendering (system + user, generation prompt) as ids, encoded once."""
        if prompt_id not in self._prompt_ids:
            messages = self.prompts[prompt_id]["prompt"]
            system = next(m["content"] for m in messages if m["role"] == "system")
            user = next(m["content"] for m in messages if m["role"] == "user")
            self._prompt_ids[prompt_id] = codec.chat_prompt_ids(system, user)
        return self._prompt_ids[prompt_id]

    def episodes(
        self, prompt_ids: Sequence[str], policy: Policy, per_prompt: int
    ) -> tuple[list[Episode], list[Reward]]:
        """``per_prompt`` episodes for each prompt (prompt by prompt) and their rewards."""
        specs = [
            EpisodeSpec(pid, self.prompt_ids(pid, policy.codec), k)
            for pid in prompt_ids
            for k in range(per_prompt)
        ]
        episodes = rollout(specs, policy, self.toolbox, self.config)
        codec = policy.codec
        texts = [decode_completion(e, codec.eos_ids, codec.decode) for e in episodes]
        rows = [self.prompts[e.task_id] for e in episodes]
        return episodes, score_episodes(episodes, rows, texts, self.params, self.judge)

    def score(self, policy: Policy) -> dict[str, float]:
        """One episode per prompt (greedy when the source is): the shares correct and format-valid,
        the mean total reward and generated tokens."""
        episodes, rewards = self.episodes(self.order, policy, 1)
        n = len(episodes)
        return {
            "correct": sum(r.is_correct for r in rewards) / n,
            "format_valid": sum(r.format_valid for r in rewards) / n,
            "reward": sum(r.total for r in rewards) / n,
            "tokens": sum(e.completion_tokens for e in episodes) / n,
        }

    def run_groups(self, prompt_ids: Sequence[str], policy: Policy) -> list[Group]:
        """``group_size`` episodes for each prompt, scored; groups in the order of ``prompt_ids``."""
        g = self.params.group_size
        episodes, rewards = self.episodes(prompt_ids, policy, g)
        return [
            self.make_group(pid, episodes[i * g : (i + 1) * g], rewards[i * g : (i + 1) * g])
            for i, pid in enumerate(prompt_ids)
        ]

    def make_group(self, prompt_id: str, episodes: list[Episode], rewards: list[Reward]) -> Group:
        """The group of ``prompt_id`` from its scored episodes."""
        row = self.prompts[prompt_id]
        return Group(
            prompt_id, str(row["task_id"]), int(row["group_index"]), str(row["variant"]), episodes, rewards
        )

    def score_group(self, prompt_id: str, episodes: list[Episode], codec: Codec) -> Group:
        """Score the episodes of one prompt (the async producer's groups)."""
        texts = [decode_completion(e, codec.eos_ids, codec.decode) for e in episodes]
        rows = [self.prompts[prompt_id]] * len(episodes)
        return self.make_group(
            prompt_id, episodes, score_episodes(episodes, rows, texts, self.params, self.judge)
        )

    def batch(
        self,
        requested: Sequence[str],
        policy: Policy,
        step: int,
        deadline: float | None = None,
        rank: tuple[int, int] = (0, 1),
        elsewhere: Sequence[str] = (),
        decide: RefillDecision = own_decision,
    ) -> RolloutBatch:
        """The generation batch for ``requested`` (prompt ids, each repeated ``group_size`` times).

        ``deadline`` (a ``time.perf_counter()`` value): no refill round starts after it. ``rank``
        (``(rank, world_size)``): on several ranks each refills from its own share of the prompts
        (every ``world_size``-th, from its rank) with a generator keyed by its rank, so ranks never
        draw the same refill and each draws the same again after a resume; ``elsewhere``: the prompts
        the other ranks generate in this batch, never drawn as a refill here; ``decide``: whether a
        round starts (on several ranks, the same answer on every rank: a rank with nothing to refill
        still takes part in each decision, and generates nothing in a round it does not want).
        """
        start = time.perf_counter()
        wanted = list(dict.fromkeys(requested))  # order-preserving unique
        rounds = [self.run_groups(wanted, policy)]
        kept = [gr for gr in rounds[0] if not gr.zero_variance or not self.params.dynamic_sampling]
        used = set(wanted) | set(elsewhere)
        index, world = rank
        key = f"{self.params.seed}:{step}" if world == 1 else f"{self.params.seed}:{step}:{index}"
        rng = random.Random(key)
        share = self.order[index::world]
        for round_ in range(1, 1 + (self.params.max_refill_rounds if self.params.dynamic_sampling else 0)):
            deficit = len(wanted) - len(kept)
            pool = [p for p in share if p not in used] if deficit > 0 else []
            open_ = deadline is None or time.perf_counter() < deadline
            if not decide(step, round_, bool(pool), open_):
                break
            if not pool:  # another rank's round: this one has nothing to refill
                continue
            extra = rng.sample(pool, min(len(pool), 2 * deficit))
            used.update(extra)
            rounds.append(self.run_groups(extra, policy))
            kept += [gr for gr in rounds[-1] if not gr.zero_variance]
        every = [gr for r in rounds for gr in r]
        dropped = [gr for gr in every if gr.zero_variance and self.params.dynamic_sampling]
        chosen = kept[: len(wanted)]
        shortfall = len(wanted) - len(chosen)
        chosen += dropped[:shortfall]
        chosen_ids = {id(gr) for gr in chosen}
        rows = [
            rollout_row(gr, k, step, id(gr) in chosen_ids, self.params.mask_truncated, step)
            for gr in every
            for k in range(len(gr.episodes))
        ]
        tallies = batch_tallies(every, rounds[0], shortfall, start)
        return RolloutBatch(chosen, rows, stats_of(tallies), tallies)


MAXIMA = frozenset({"generation_s", "wall_s"})
"""Tallies that pool as the largest over ranks (wall times, spent side by side); the others add up."""


def batch_tallies(
    every: Sequence[Group], first: Sequence[Group], shortfall: int, start: float
) -> dict[str, float]:
    """The counts, sums and maxima of one generation batch (``every`` group generated; ``first`` the
    requested ones) that :func:`stats_of` turns into its metrics."""
    episodes = [e for gr in every for e in gr.episodes]
    tallies = {
        "groups_first": float(len(first)),
        "zero_variance_first": float(sum(gr.zero_variance for gr in first)),
        "groups": float(len(every)),
        "shortfall": float(shortfall),
        "episodes": float(len(episodes)),
        "tool_calls": float(sum(len(e.tool_calls) for e in episodes)),
        "truncated": float(sum(e.finish in TRUNCATED for e in episodes)),
        "tool_s": sum(e.tool_s for e in episodes),
        "generation_s": max((e.generation_s for e in episodes), default=0.0),
        "wall_s": time.perf_counter() - start,
    }
    for name in TERMS:
        tallies[f"term_{name}"] = sum(r.term(name) for gr in every for r in gr.rewards)
    return tallies


def pool_tallies(tallies: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The tallies of several ranks' batches as one batch's (sums; the largest of :data:`MAXIMA`)."""
    keys = tallies[0].keys()
    return {k: (max if k in MAXIMA else sum)(float(t[k]) for t in tallies) for k in keys}


def stats_of(tallies: Mapping[str, float]) -> dict[str, float]:
    """The metrics of a generation batch from its (maybe pooled) tallies."""
    n = max(1.0, tallies["episodes"])
    stats = {
        "dynamic/zero_variance_share": tallies["zero_variance_first"] / max(1.0, tallies["groups_first"]),
        "dynamic/groups_generated": tallies["groups"],
        "dynamic/shortfall_groups": tallies["shortfall"],
        "rollout/episodes": tallies["episodes"],
        "rollout/tool_calls_mean": tallies["tool_calls"] / n,
        "rollout/truncated_share": tallies["truncated"] / n,
        "rollout/generation_s": tallies["generation_s"],
        "rollout/tool_s": tallies["tool_s"],
        "rollout/wall_s": tallies["wall_s"],
    }
    for name in TERMS:
        stats[f"rollout/{name}_mean"] = tallies[f"term_{name}"] / n
    return stats


def rollout_row(
    group: Group, k: int, step: int, kept: bool, mask_truncated: bool, version: int
) -> dict[str, Any]:
    """The ``rollout.v1`` row of episode ``k`` of ``group`` (``version``: the trainer's weights, for a
    policy that reports none)."""
    episode, reward = group.episodes[k], group.rewards[k]
    return {
        "task_id": group.task_id,
        "prompt_id": group.prompt_id,
        "variant": group.variant,
        "group": group.group_index,
        "sample": k,
        "step": step,
        "prompt_ids": list(episode.prompt_ids),
        "completion_ids": list(episode.completion_ids),
        "loss_mask": train_mask(episode, mask_truncated),
        "text": episode.text,
        "reward": reward.total,
        **{f"reward_{name}": reward.term(name) for name in TERMS},
        "correct": reward.is_correct,
        "format_valid": reward.format_valid,
        "tool_calls": len(episode.tool_calls),
        "tokens": episode.completion_tokens,
        "finish": episode.finish or "",
        "kept": kept,
        "policy_version": episode_version(episode, version),
        "old_kv": episode.old_kv,
        "behaviour_logprobs": [None if lp is None else float(lp) for lp in episode.logprobs],
    }
