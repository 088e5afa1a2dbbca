"""Fixtures of the orchestration tests: the PostgreSQL cluster their Prefect server runs on."""

from .postgres import postgres

__all__ = ["postgres"]
