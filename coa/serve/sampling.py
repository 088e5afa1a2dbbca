"""The tensor helpers of the continuous batcher (:mod:`coa.serve.engine`): left padding of caches and
masks, the top-k / top-p filtered sampling distribution, the ranked logprobs of given ids."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def left_pad(t: Any, width: int) -> Any:
    """``t`` ([rows, ..., length] on the last-but-one axis for caches, the last for masks) padded left."""
    import torch

    if t.dim() == 2:
        missing = width - t.shape[1]
        return t if missing == 0 else torch.cat([t.new_zeros((t.shape[0], missing)), t], dim=1)
    missing = width - t.shape[-2]
    if missing == 0:
        return t
    pad = t.new_zeros((*t.shape[:-2], missing, t.shape[-1]))
    return torch.cat([pad, t], dim=-2)


def filtered_probs(logprobs: Any, top_k: Sequence[int], top_p: Sequence[float]) -> Any:
    """Probabilities after each row's top-k and top-p cut (the best id always survives)."""
    import torch

    scores = logprobs.clone()
    vocab = scores.shape[-1]
    for i, k in enumerate(top_k):
        if 0 < k < vocab:
            kth = torch.topk(scores[i], k).values[-1]
            scores[i][scores[i] < kth] = float("-inf")
    if any(p < 1.0 for p in top_p):
        order = torch.argsort(scores, dim=-1, descending=True)
        sorted_probs = torch.softmax(scores.gather(1, order), dim=-1)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass strictly above each id
        limit = torch.tensor(list(top_p), device=scores.device).view(-1, 1)
        drop_sorted = before >= limit
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return torch.softmax(scores, dim=-1)


def ranked_logprobs(logprobs: Any, actual: Any, n: int) -> list[list[tuple[int, float]] | None]:
    """Per position: the actual id's ``(id, logprob)`` first, then the ``n`` most likely others."""
    import torch

    own = logprobs.gather(1, actual.view(-1, 1)).view(-1).tolist()
    out: list[list[tuple[int, float]] | None] = []
    top_values, top_ids = torch.topk(logprobs, n, dim=-1) if n > 0 else (None, None)
    for i, token in enumerate(actual.tolist()):
        entry = [(token, own[i])]
        if top_ids is not None and top_values is not None:
            entry += [
                (t, v) for t, v in zip(top_ids[i].tolist(), top_values[i].tolist(), strict=True) if t != token
            ][:n]
        out.append(entry)
    return out
