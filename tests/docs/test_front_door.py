"""The front door stays a first visit: a short README, the history in one dated log, plain profiles.

README.md is at most 80 lines and names the two commands; measurement history lives in
``docs/history.md`` (in the site's nav); a profile's comments (``configs/*.yaml``) say what a setting
does and link to why, never citing a date or a commit; every profile opens with how to run and
override it; every ``docs/history.md#anchor`` a profile or page links to exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "configs").glob("*.yaml"))
DATE = re.compile(r"20\d\d-\d\d-\d\d")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
"""A commit hash: 7-40 hex digits with at least one letter and one digit."""


def _comments(path: Path) -> list[str]:
    """Every comment in a YAML file (whole-line and trailing), without its ``#``."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if "#" in line:
            out.append(line.split("#", 1)[1].strip())
    return out


def test_the_readme_is_a_first_visit() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 80
    assert "make demo" in text and "make test" in text
    assert "docs/history.md" in text and "docs/performance.md" in text
    assert not DATE.search(text), "dated measurements belong in docs/history.md"


def test_the_history_is_in_the_nav() -> None:
    assert (REPO / "docs" / "history.md").is_file()
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    assert re.search(r"^  - History: history\.md$", nav, re.M)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_profile_comments_cite_no_date_or_commit(profile: Path) -> None:
    for comment in _comments(profile):
        assert not DATE.search(comment), f"{profile.name}: {comment}"
        assert not COMMIT.search(comment), f"{profile.name}: {comment}"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_each_profile_says_how_to_run_and_override_it(profile: Path) -> None:
    head = profile.read_text(encoding="utf-8").split("\n\n")[0]
    assert "coa run --config" in head, profile.name


def test_every_history_anchor_linked_exists() -> None:
    ids = set(re.findall(r"\{#([a-z0-9-]+)\}", (REPO / "docs" / "history.md").read_text(encoding="utf-8")))
    sources = [*PROFILES, REPO / "README.md", *(REPO / "docs").rglob("*.md")]
    for source in sources:
        for anchor in re.findall(r"history\.md#([a-z0-9-]+)", source.read_text(encoding="utf-8")):
            assert anchor in ids, f"{source.name}: history.md#{anchor}"
