"""The model registry and the promotion gate.

* :mod:`coa.registry.store`: per model name a champion alias (one small JSON, moved atomically) and
  an append-only history of every candidate with its evaluation, gate verdict and reasons
  (:class:`~coa.registry.store.Registry`);
* :mod:`coa.registry.gate`: the promotion gate (lineage checks, decontamination, per-benchmark
  non-regression at a paired-bootstrap lower bound, a gain on the primary metric).

This package imports nothing: a step's key hashes the files its build can reach (its import
closure), and a package that re-exported its modules would put all of them in every closure that
reaches one. Import the module that holds a name (``from coa.registry.store import Registry``).
"""
