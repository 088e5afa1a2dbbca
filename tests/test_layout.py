"""The house stays easy to change: no module of the project's packages grows past ~500 lines.

A module that long holds more than one concern; split it along a seam (a module named for what it
does) rather than raise the limit. The sandbox is exempt by name: ``coa/tools/sandbox.py`` (the
bubblewrap launcher and its limits) and ``coa/tools/sandbox_harness.py`` (the script bound into the
sandbox as one file, so it cannot import a sibling module).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 500
PACKAGES = ("coa", "tasks", "flows", "schemas")
EXEMPT = {"coa/tools/sandbox.py", "coa/tools/sandbox_harness.py"}
"""The sandbox, by name: the only modules allowed past :data:`MAX_LINES`."""


def oversized(root: Path, packages: tuple[str, ...], exempt: set[str]) -> dict[str, int]:
    """``{path: lines}`` of every module under ``packages`` (relative to ``root``) over the limit."""
    found: dict[str, int] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > MAX_LINES and rel not in exempt:
                found[rel] = lines
    return found


def test_no_module_is_over_the_limit_but_the_sandbox() -> None:
    over = oversized(REPO, PACKAGES, EXEMPT)
    assert over == {}, f"split these along a seam (one concern, named for it), max {MAX_LINES} lines: {over}"


def test_the_exempt_modules_exist() -> None:
    """An exemption for a module that moved or was split would silently exempt nothing."""
    assert all((REPO / path).is_file() for path in EXEMPT), sorted(
        p for p in EXEMPT if not (REPO / p).is_file()
    )


def test_the_check_finds_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "coa" / "sub").mkdir(parents=True)
    (tmp_path / "coa" / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "coa" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "coa" / "sandbox.py").write_text("x = 1\n" * (MAX_LINES + 5))
    assert oversized(tmp_path, ("coa",), {"coa/sandbox.py"}) == {"coa/sub/long.py": MAX_LINES + 1}


TOP_LEVEL = ("pyproject.toml", "flows", "tasks", "schemas", "infra", "tests", "configs")
"""The layout the project's design names: Prefect flows (``flows/``) chain Prefect tasks (``tasks/``)."""


def test_the_designed_top_level_exists() -> None:
    missing = [name for name in TOP_LEVEL if not (REPO / name).exists()]
    assert missing == [], f"the design names these top-level entries; restore them: {missing}"
    assert (REPO / "tasks" / "__init__.py").is_file(), "tasks/ is the Prefect task layer (a package)"
