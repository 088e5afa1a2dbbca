"""Policies the rollout engine drives: HF ``generate``, a completions server, a scripted mock."""
