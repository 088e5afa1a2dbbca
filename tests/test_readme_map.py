"""The README's map of the code (between ``<!-- code-map -->`` and ``<!-- /code-map -->``) matches the tree.

Every path the map names exists; every module a row lists after a package path (``coa/tools/``
(``code``, ``search``, …)) is a module or subpackage of that package; and every package and module of
``coa/`` is named, so a new one cannot be left off the map, nor a moved one stay on it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
START, END = "<!-- code-map -->", "<!-- /code-map -->"
PATH = re.compile(r"^(?:coa|schemas|tasks|flows)/(?:\w+/)*(?:\w+\.py)?$")
"""A package (``coa/tools/``) or a module file (``coa/io.py``); a bare word is a module name."""
NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


def _map_text() -> str:
    """The map, from the README or (if the docs moved it) the one Markdown page that holds it."""
    holders = [p for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))] if p.is_file()]
    found = [p for p in holders if START in p.read_text(encoding="utf-8")]
    assert len(found) == 1, f"expected the code map ({START} … {END}) in exactly one page, found {found}"
    text = found[0].read_text(encoding="utf-8")
    return text[text.index(START) + len(START) : text.index(END)]


def map_entries(text: str) -> list[tuple[str, list[str]]]:
    """(path, modules listed after it) for every backticked path in the map's table rows."""
    entries: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        current: tuple[str, list[str]] | None = None
        for token in re.findall(r"`([^`]+)`", line):
            if PATH.match(token):
                current = (token, [])
                entries.append(current)
            elif current is not None and current[0].endswith("/") and NAME.match(token):
                current[1].append(token)
    return entries


def _exists(path: str) -> bool:
    target = REPO / path.rstrip("/")
    return (target / "__init__.py").is_file() if path.endswith("/") else target.is_file()


def _module_exists(package: str, name: str) -> bool:
    base = REPO / package.rstrip("/")
    return (base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file()


def test_the_parser_reads_paths_and_their_modules() -> None:
    rows = "| a | b |\n|---|---|\n| x | `coa/tools/` (`code`, `tasks`), `coa/io.py` and `ToolsConfig` |\n"
    assert map_entries(rows) == [("coa/tools/", ["code", "tasks"]), ("coa/io.py", [])]


def test_every_path_and_module_the_map_names_exists() -> None:
    entries = map_entries(_map_text())
    assert entries, "the code map names no path"
    missing = [path for path, _ in entries if not _exists(path)]
    missing += [
        f"{path}{name}" for path, names in entries for name in names if not _module_exists(path, name)
    ]
    assert missing == [], f"the code map names what the tree does not have: {missing}"


def test_every_package_and_module_of_coa_is_on_the_map() -> None:
    named = {path.rstrip("/") for path, _ in map_entries(_map_text())}
    tree = {str(p.relative_to(REPO)) for p in (REPO / "coa").iterdir() if (p / "__init__.py").is_file()} | {
        str(p.relative_to(REPO)) for p in (REPO / "coa").glob("*.py") if p.name != "__init__.py"
    }
    assert tree - named == set(), f"add these to the code map: {sorted(tree - named)}"


@pytest.mark.parametrize("package", ["tasks", "flows"])
def test_every_module_of_the_prefect_layer_is_on_the_map(package: str) -> None:
    listed = {name for path, names in map_entries(_map_text()) if path == f"{package}/" for name in names}
    tree = {p.stem for p in (REPO / package).glob("*.py") if p.name != "__init__.py"}
    assert tree - listed == set(), f"add these to the {package}/ row of the code map: {sorted(tree - listed)}"
