"""The policy an evaluation runs: HF ``generate`` in this process, or a completions server (vLLM).

Both are :mod:`coa.rollout` policies (token ids in, token ids and logprobs out); the endpoint one
reads the model's tokenizer from ``model`` (a local folder or a hub name) to build prompt ids and
decode what the server sampled.
"""

from __future__ import annotations

from coa.evaluate.config import EvalConfig
from coa.rollout.policy import Codec, Policy


def open_policy(config: EvalConfig, model: str) -> Policy:
    """The policy of ``config.backend`` for ``model``."""
    if config.backend == "endpoint":
        from coa.rollout.policies.endpoint import EndpointPolicy

        assert config.endpoint is not None
        return EndpointPolicy(
            config.endpoint, Codec.from_pretrained(model), max_connections=config.concurrency
        )
    from coa.rollout.policies.hf import HFPolicy

    return HFPolicy(model, max_batch=config.batch_size)
