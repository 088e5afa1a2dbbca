"""Truncated importance sampling (TIS) for rollouts sampled by weights other than the trainer's.

A rollout sampled by a server (other numerics) or by an older policy version (async RL) is
off-policy for the trainer. With ``is_correction: tis`` each trained token's loss is weighted by

    w = min(exp(logp_trainer - logp_behaviour), tis_cap)

where ``logp_trainer`` is the trainer's logprob of the sampled id at the start of the generation
batch (TRL's ``old_per_token_logps``, before any of the batch's optimizer steps) and
``logp_behaviour`` the logprob the sampling policy reported (the rollout row's
``behaviour_logprobs``). The weight is detached, never larger than the cap, and exactly 1 where
no behaviour logprob was recorded (environment ids, which the mask excludes anyway, and padding).

Why not TRL's own correction: TRL 1.16 computes and applies an importance ratio from a
``rollout_func``'s ``logprobs`` (``vllm_importance_sampling_correction``, modes ``token_truncate``
...) only when ``use_vllm`` is true, and no field of the ``rollout_func``'s output changes that.
The lines, in ``trl/trainer/grpo_trainer.py`` of trl 1.16.0:

* 2643-2645: ``old_per_token_logps`` is computed only ``if gradient_accumulation_steps %
  generate_every != 0 or (self.use_vllm and self.vllm_importance_sampling_correction)``;
* 2660: the ratio (``vllm_importance_sampling_ratio``) is computed only ``if self.use_vllm and
  self.vllm_importance_sampling_correction``; 2908-2909: only then is it put in the batch;
* 3146-3147: the loss multiplies by ``inputs["importance_sampling_ratio"]`` only ``if
  self.use_vllm and self.vllm_importance_sampling_correction``;
* and ``use_vllm`` cannot be set for a ``rollout_func`` that brings its own engine: 1105-1140 build
  TRL's own vLLM client (``VLLMGeneration``, which imports vLLM in the trainer and connects to
  ``vllm_server_*``) and 2202-2205 push the weights through it before every ``rollout_func`` call.

What TRL reads from the ``rollout_func``'s ``logprobs`` on any other path is only
``sampling_per_token_logps`` (2463-2478, 2910-2911), which the loss reads only for the off-policy
sequence mask (3068-3073, ``off_policy_mask_threshold``, not set by the RL stage). So the
correction is one override of the trainer's **public** hook ``compute_loss`` (transformers'
documented extension point; no private method of TRL is overridden): it reads
``sampling_per_token_logps`` and ``old_per_token_logps`` from the inputs TRL hands it and folds the
weights into per-token advantages, which TRL's loss takes as ``(B, T)`` (3055-3059). Where TRL
skipped ``old_per_token_logps`` (each generation batch feeds one optimizer step), the weights
have not moved since the batch was generated, and one no-grad forward through TRL's own
``_get_per_token_logps_and_entropies`` (called, not overridden: same temperature and numerics as
TRL's) gives them. The engine's logprobs must be of the sampling distribution: the RL stage refuses
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

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            if self.coa_tis_cap is not None and inputs.get("sampling_per_token_logps") is not None:
                inputs = self.coa_tis_inputs(inputs)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def coa_tis_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
            """``inputs`` with the advantages weighted token by token by :func:`tis_weights`."""
            old = inputs.get("old_per_token_logps")
            if old is None:  # one optimizer step per batch: the weights are still the batch's
                ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
                attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
                with torch.no_grad():
                    old, _, _ = self._get_per_token_logps_and_entropies(
                        self.model,
                        ids,
                        attention,
                        inputs["completion_ids"].size(1),
                        batch_size=self.args.per_device_train_batch_size,
                    )
            mask = inputs["completion_mask"]
            cap = self.coa_tis_cap
            assert cap is not None  # compute_loss calls it only with a cap
            weights = tis_weights(old, inputs["sampling_per_token_logps"], mask, cap)
            known = mask > 0
            metrics = self._metrics["train"]
            metrics["tis/weight_mean"].append(float(weights[known].mean()) if known.any() else 1.0)
            metrics["tis/capped_share"].append(
                float((weights[known] >= cap).float().mean()) if known.any() else 0.0
            )
            advantages = inputs["advantages"]
            advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
            return {**inputs, "advantages": advantages * weights}

    TISTrainer.__name__ = TISTrainer.__qualname__ = f"TIS{base.__name__}"
    return TISTrainer
