"""A module imported where it is first used, not where its importer is: polars for curation.

Curation and conversion are built on polars (~55 MiB installed). Every entry layer imports the stage
table (:mod:`coa.plan.stages`), which imports each stage's module, so an eager ``import polars`` made
polars a requirement of every step, also of a GPU machine that only trains and evaluates on a store
curated elsewhere (``infra/gpu-check.sh``: polars does not fit beside the wheels it carries). A
module that uses polars holds ``pl = lazy_module("polars", "curation")`` instead: the first
attribute read imports polars (Python's import lock makes that safe from several threads), and a
machine without it fails there, with a :class:`MissingDependency` naming the package and the work
that needs it, instead of at ``import coa.plan``.

Type checkers see the real module (``if TYPE_CHECKING: import polars as pl``).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from coa.errors import InfraError


class MissingDependency(InfraError, ImportError):
    """A package a step needs is not installed on this machine."""


def _polars() -> types.ModuleType:
    import polars

    return polars


_IMPORTERS: dict[str, Callable[[], types.ModuleType]] = {"polars": _polars}
"""The packages that may be imported late, each by a plain ``import`` (the import contracts read it)."""


class _LazyModule(types.ModuleType):
    """Stands for ``name`` until an attribute is read, then forwards to (and caches from) the module."""

    def __init__(self, name: str, needed_for: str) -> None:
        super().__init__(name)
        self.__dict__["_lazy_needed_for"] = needed_for
        self.__dict__["_lazy_module"] = None

    def _load(self) -> types.ModuleType:
        module = self.__dict__["_lazy_module"]
        if module is None:
            try:
                module = _IMPORTERS[self.__name__]()
            except ModuleNotFoundError as e:
                if e.name != self.__name__:
                    raise
                needed_for = self.__dict__["_lazy_needed_for"]
                raise MissingDependency(
                    f"{self.__name__} is not installed here and {needed_for} needs it: "
                    f"pip install {self.__name__} (the version pyproject.toml pins), or run this step where "
                    "the project's dependencies are installed"
                ) from e
            self.__dict__["_lazy_module"] = module
        return module

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):  # copy, pickle and doc tools probe dunders
            raise AttributeError(attr)
        value = getattr(self._load(), attr)
        self.__dict__[attr] = value  # later reads skip __getattr__: a module's attributes do not move
        return value


def lazy_module(name: str, needed_for: str) -> Any:
    """``name``, imported on its first attribute read; ``needed_for`` names the work that needs it."""
    if name not in _IMPORTERS:
        raise ValueError(f"{name} has no importer in coa.lazy._IMPORTERS: add one (a plain import)")
    return _LazyModule(name, needed_for)


def available(module: Any) -> bool:
    """Whether a module given by :func:`lazy_module` (or a real one) can be imported here."""
    if not isinstance(module, _LazyModule):
        return True
    try:
        module._load()
    except MissingDependency:
        return False
    return True
