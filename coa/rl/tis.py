"""Truncated importance sampling (TIS) for rollouts sampled by weights other than the trainer's.

A rollout sampled by a server (other numerics) or by an older policy version (async RL) is
off-policy for the trainer. With ``is_correction: tis`` each trained token's loss is weighted by

    w = min(exp(logp_trainer - logp_behaviour), tis_cap)

where ``logp_trainer`` is the trainer's logprob of the sampled id at the start of the generation
batch (TRL's ``old_per_token_logps``, before any of the batch's optimizer steps) and
``logp_behaviour`` the logprob the sampling policy reported (the rollout row's
``behaviour_logprobs``). The weight is detached, never larger than the cap, and exactly 1 where
no behaviour logprob was recorded (environment ids, which the mask excludes anyway, and padding).

Why not TRL's own correction: TRL 1.16 computes an importance ratio from a ``rollout_func``'s
``logprobs`` (``vllm_importance_sampling_correction``, modes ``token_truncate`` ... in
``trl/trainer/grpo_trainer.py``) only inside ``if self.use_vllm and
self.vllm_importance_sampling_correction`` (both where ``old_per_token_logps`` is computed and
where the ratio is), and ``use_vllm=True`` builds TRL's own vLLM client and imports vLLM in the
trainer process. Our rollouts come from ``coa.engines`` or in process, with ``use_vllm=False``,
so that gap forces :func:`corrected_trainer` to override ``_generate_and_score_completions`` and
``_compute_loss``. The engine's logprobs must be of the sampling distribution: the RL stage refuses
TIS at a temperature other than 1 when the engine cannot say so
(:meth:`coa.engines.EngineClient.refuse_tis`).
"""

from __future__ import annotations

from typing import Any


def tis_weights(trainer_logps: Any, behaviour_logps: Any, mask: Any, cap: float) -> Any:
    """Per-token TIS weights ``min(exp(trainer - behaviour), cap)``; 1 where masked out or unknown (NaN)."""
    import torch

    diff = (trainer_logps.detach() - behaviour_logps).float()
    known = torch.isfinite(diff) & (mask > 0)
    ratio = torch.exp(torch.where(known, diff, torch.zeros_like(diff)))
    return torch.clamp(ratio, max=cap).detach()


def corrected_trainer(base: type) -> type:
    """``base`` (TRL's ``GRPOTrainer``) with TIS: the weights are folded into per-token advantages.

    TRL's clipped surrogate ``-min(r * A, clip(r) * A)`` is linear in ``A`` for a positive
    weight, so ``w * loss(A) == loss(w * A)`` token by token: a ``(B, T)`` advantage tensor (which
    TRL's loss takes) carries the correction without touching TRL's loss code.
    """
    import torch

    class TISTrainer(base):  # type: ignore[misc,valid-type]
        coa_tis_cap: float | None = None

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            out: dict[str, Any] = super()._generate_and_score_completions(inputs)
            if self.coa_tis_cap is None or out.get("sampling_per_token_logps") is None:
                return out
            old = out.get("old_per_token_logps")
            if old is None:  # one optimizer step per batch: TRL skips it; the trainer's logprobs now
                ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                with torch.no_grad():
                    old, _, _ = self._get_per_token_logps_and_entropies(
                        self.model,
                        ids,
                        attention,
                        out["completion_ids"].size(1),
                        batch_size=self.args.per_device_train_batch_size,
                    )
                out["old_per_token_logps"] = old
            weights = tis_weights(
                old, out["sampling_per_token_logps"], out["completion_mask"], self.coa_tis_cap
            )
            out["coa_tis_weights"] = weights
            known = out["completion_mask"] > 0
            self._metrics["train"]["tis/weight_mean"].append(
                float(weights[known].mean()) if known.any() else 1.0
            )
            self._metrics["train"]["tis/capped_share"].append(
                float((weights[known] >= self.coa_tis_cap).float().mean()) if known.any() else 0.0
            )
            return out

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            weights = inputs.get("coa_tis_weights")
            if weights is not None:
                advantages = inputs["advantages"]
                advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
                inputs = {**inputs, "advantages": advantages * weights}
            return super()._compute_loss(model, inputs)

    TISTrainer.__name__ = TISTrainer.__qualname__ = f"TIS{base.__name__}"
    return TISTrainer
