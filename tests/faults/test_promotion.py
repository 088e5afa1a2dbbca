"""Two nightly runs promoting at once: every promotion lands on the champion stack (none is lost),
there is one champion, and a promotion gated against a champion that changed meanwhile is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coa.registry.store import Registry, RegistryError
from tests.faults.conftest import record
from tests.faults.harness import REPO, subprocess_env

PROMOTIONS = 12
SCRIPT = """
import sys
from coa.registry.store import Registry
registry, tag = Registry(sys.argv[1]), sys.argv[2]
for i in range({n}):
    registry.promote("student", f"file:///models/{{tag}}-{{i}}", verdict={{"run": tag}})
"""


def test_two_processes_promoting_at_once_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT.format(n=PROMOTIONS), str(root), tag],
            cwd=REPO,
            env=subprocess_env(root),
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for tag in ("a", "b")
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    registry = Registry(str(root))
    champion = registry.champion("student")
    assert champion is not None
    stack = [uri for uri, _ in champion.previous] + [champion.model_uri]
    promoted = [e.model_uri for e in registry.history("student") if e.event == "promote"]
    expected = {f"file:///models/{t}-{i}" for t in "ab" for i in range(PROMOTIONS)}
    held = len(stack) == len(set(stack)) == 2 * PROMOTIONS and set(stack) == set(promoted) == expected
    record("registry", "two promotions at once", held)
    assert held, (len(stack), len(set(stack)))
    # each promotion's entry names the champion it replaced: the stack is one chain, no fork
    previous = {e.model_uri: e.previous for e in registry.history("student") if e.event == "promote"}
    assert [previous[uri] for uri in stack] == [None, *stack[:-1]]


def test_a_promotion_gated_against_a_stale_champion_is_refused(tmp_path: Path) -> None:
    registry = Registry(str(tmp_path / "store"))
    registry.promote("student", "file:///models/a", if_champion=None)
    registry.promote("student", "file:///models/b", if_champion="file:///models/a")  # another run
    with pytest.raises(RegistryError, match="changed while file:///models/c was gated"):
        registry.promote("student", "file:///models/c", if_champion="file:///models/a")
    assert registry.resolve("student") == "file:///models/b"
