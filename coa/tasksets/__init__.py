"""The task-import stage: benchmark and training task files → ``task.v1`` (+ a quarantine).

``config`` (what to import), ``importer`` (the import, pure: ``containers`` reads files and folders,
``layouts`` detects a source's layout and converts its rows, ``quarantine`` keeps the rejected rows),
``step`` (the step).
"""

from coa.tasksets.config import Family, TasksConfig, TaskSourceConfig
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
