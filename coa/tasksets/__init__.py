"""The task-import stage: benchmark and training task files → ``task.v1`` (+ a quarantine).

``config`` (what to import), ``importer`` (the import, pure: ``containers`` reads files and folders,
``layouts`` detects a source's layout and converts its rows, ``quarantine`` keeps the rejected rows),
``step`` (the step).
"""

from typing import TYPE_CHECKING, Any

from coa.tasksets.config import Family, TasksConfig, TaskSourceConfig

if TYPE_CHECKING:
    from coa.tasksets.importer import (
        ImportResult,
        SourceSummary,
        TaskImportError,
        detect_layout,
        import_tasks,
    )

__all__ = [
    "Family",
    "ImportResult",
    "SourceSummary",
    "TaskImportError",
    "TaskSourceConfig",
    "TasksConfig",
    "detect_layout",
    "import_tasks",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in ("ImportResult", "SourceSummary", "TaskImportError", "detect_layout", "import_tasks"):
        from coa.tasksets import importer

        return getattr(importer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
