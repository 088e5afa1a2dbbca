"""Agent tools that run locally: the bubblewrap sandbox, the ``code`` tool and the code-test runner.

``coa.tools.sandbox`` runs model-written Python confined (no network, no host files, rlimits) and
refuses (``SandboxUnavailable``) when no sandbox works; ``coa.tools.code`` wraps it as AFM's code
tool (payload -> observation string) and as ``run_tests`` for code-test scoring.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coa.tools.code import (
        AssertTest,
        CaseResult,
        CodeTest,
        IOTest,
        RunTestsReport,
        code_tool,
        format_observation,
        make_code_tool,
        run_tests,
        truncate_content,
    )
    from coa.tools.sandbox import (
        SandboxConfig,
        SandboxResult,
        SandboxUnavailable,
        run_python,
        sandbox_available,
    )

__all__ = [
    "AssertTest",
    "CaseResult",
    "CodeTest",
    "IOTest",
    "RunTestsReport",
    "SandboxConfig",
    "SandboxResult",
    "SandboxUnavailable",
    "code_tool",
    "format_observation",
    "make_code_tool",
    "run_python",
    "run_tests",
    "sandbox_available",
    "truncate_content",
]


def __getattr__(name: str) -> Any:
    """PEP 562: the implementation loads on first use, so loading the config loads none of it."""
    if name in (
        "AssertTest",
        "CaseResult",
        "CodeTest",
        "IOTest",
        "RunTestsReport",
        "code_tool",
        "format_observation",
        "make_code_tool",
        "run_tests",
        "truncate_content",
    ):
        from coa.tools import code

        return getattr(code, name)
    if name in ("SandboxConfig", "SandboxResult", "SandboxUnavailable", "run_python", "sandbox_available"):
        from coa.tools import sandbox

        return getattr(sandbox, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
