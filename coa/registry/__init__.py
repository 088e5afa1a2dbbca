"""The model registry and the promotion gate.

* :mod:`coa.registry.store`: per model name a champion alias (one small JSON, moved atomically) and
  an append-only history of every candidate with its evaluation, gate verdict and reasons.
* :mod:`coa.registry.gate`: the promotion gate (lineage checks, decontamination, per-benchmark
  non-regression at a paired-bootstrap lower bound, a gain on the primary metric).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coa.registry.store import Champion, Entry, Registry, RegistryError

__all__ = ["Champion", "Entry", "Registry", "RegistryError"]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in ("Champion", "Entry", "Registry", "RegistryError"):
        from coa.registry import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
