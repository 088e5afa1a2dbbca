"""The names two evaluations are compared by: their metrics and the pooled row.

Apart from :mod:`coa.evaluate.config` so that the promotion gate (:mod:`coa.registry`) and
:mod:`coa.evaluate.compare` read them without reaching the evaluation's config and what it imports
(the LLM, tools and rollout configs): the gate's key hashes only the files its build can reach.
"""

from __future__ import annotations

METRICS = ("correct", "score", "format_valid")
"""The per-run metrics two evaluations are compared on (:mod:`coa.evaluate.compare`, the promotion gate)."""
ALL = "all"
"""The name of every evaluated pair together (a comparison's pooled row, the gate's default benchmark)."""
