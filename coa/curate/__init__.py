"""Curation of raw teacher trajectories: filters, dedup, decontamination, a data-quality gate.

The core is :func:`coa.curate.core.curate` (pure: batches in, callbacks out), the step on storage
:mod:`coa.curate.step`; see :mod:`coa.curate.core` for the flow
and the other modules for each concept. Nothing here imports Prefect.

This package imports nothing: a step's key hashes the files its build can reach (its import
closure), and a package that re-exported its modules would put all of them in the closure of every
step that uses one (the gate normalizes text with :mod:`coa.curate.text`). Import the module that
holds a name (``from coa.curate.core import curate``, ``from coa.curate.config import CurateConfig``).
"""
