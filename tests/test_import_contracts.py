"""The layering holds: the import contracts of pyproject.toml (``lint-imports``) and every import of coa/.

``lint-imports`` (import-linter) reads every ``import`` statement, inside functions too, but not an
``importlib.import_module("...")`` string; the AST walk here reads those as well, so an import hidden
from the contracts fails here. A copy of the tree with deliberate violations shows the contracts break.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("coa", "flows", "tasks", "schemas")
ORCHESTRATION = ("prefect", "prefect_ray", "flows", "tasks")
"""What the domain library may not import: Prefect and the layers built on it."""
ENTRY = ("coa/cli.py", "coa/cli/", "coa/_cli/")
"""The CLI (``coa.cli`` and its command modules): the part of coa above the Prefect layer."""
STRING_IMPORTS_ALLOWED: set[tuple[str, str]] = set()
"""(file, module) pairs allowed to import a first-party module by name (none: they hide an edge)."""


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def test_import_contracts_hold() -> None:
    done = _lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_prefect_layer_imports_no_stage_module() -> None:
    """tasks and flows read the stage table through a step: every stage layer is forbidden to them."""
    contract = _contracts()["prefect-knows-no-stage"]
    assert set(contract["source_modules"]) == {"tasks", "flows"}
    stages = contract["forbidden_modules"]
    layers = _contracts()["layers"]["layers"]
    for layer in layers[
        layers.index("coa.registry") + 1 : layers.index("coa.rl | coa.convert | coa.sample") + 2
    ]:
        assert {m.strip() for m in layer.split("|")} <= set(stages), layer


def test_the_trainers_stand_side_by_side_on_their_kit() -> None:
    """RL imports no module of SFT's package (coa.train) and the kit neither trainer: the kit sits in a
    layer below both, and a forbidden contract keeps RL off SFT (the layers alone allow it)."""
    contract = _contracts()["trainers-side-by-side"]
    assert set(contract["source_modules"]) == {"coa.rl", "coa.kit"}
    assert contract["forbidden_modules"] == ["coa.train"]
    assert not contract.get("allow_indirect_imports", False)
    layers = [{m.strip() for m in layer.split("|")} for layer in _contracts()["layers"]["layers"]]
    at = {module: i for i, layer in enumerate(layers) for module in layer}
    assert at["coa.kit"] > max(at["coa.rl"], at["coa.train"])  # a lower layer: it imports neither


def test_every_module_of_coa_has_a_place_in_the_contracts() -> None:
    """A new subpackage or module of coa must be given a layer; the no-Prefect rule covers all of coa."""
    children = {
        f"coa.{p.stem if p.is_file() else p.name}"
        for p in (REPO / "coa").iterdir()
        if (p.is_file() and p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    contracts = _contracts()
    layered = {
        name.strip().strip("()")
        for layer in contracts["layers"]["layers"]
        for name in layer.replace("|", ":").split(":")
    }
    assert children - layered == set(), "add these to a layer of the 'layers' contract (pyproject.toml)"
    assert {"coa.*", "schemas"} <= set(contracts["no-prefect"]["source_modules"])


def imported_modules(source: str) -> list[tuple[int, str, bool]]:
    """(line, module, by name) of every import in ``source``: statements anywhere (functions, classes,
    branches) and, by name, ``importlib.import_module("m")`` / ``__import__("m")``; a call whose
    module is not a string literal yields ``"<dynamic>"`` (it cannot be checked)."""
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, False) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                found.append((node.lineno, node.module, False))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__"):
                arg = node.args[0] if node.args else None
                module = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
                found.append((node.lineno, module or "<dynamic>", True))
    return found


def _top(module: str) -> str:
    return module.split(".")[0]


def _files(*packages: str) -> list[Path]:
    return sorted(p for pkg in packages for p in (REPO / pkg).rglob("*.py"))


@pytest.mark.parametrize(
    "source",
    [
        "import prefect\n",
        "def f():\n    from prefect.blocks.system import Secret\n",
        "class A:\n    def m(self):\n        if True:\n            import flows.pipeline\n",
        "import importlib\nx = importlib.import_module('tasks.fanout')\n",
        "from importlib import import_module\ndef f():\n    return import_module('prefect')\n",
        "def f():\n    return __import__('prefect_ray')\n",
    ],
)
def test_the_walk_reads_every_import(source: str) -> None:
    assert {_top(m) for _, m, _ in imported_modules(source)} & set(ORCHESTRATION)


def test_domain_code_imports_no_prefect() -> None:
    """No module of coa (the CLI aside) or schemas imports Prefect, flows or tasks (Prefect), anywhere."""
    offenders = []
    for path in _files("coa", "schemas"):
        rel = str(path.relative_to(REPO))
        if rel.startswith(ENTRY):
            continue
        for line, module, _ in imported_modules(path.read_text()):
            if _top(module) in ORCHESTRATION or module == "<dynamic>":
                offenders.append(f"{rel}:{line} imports {module}")
    assert offenders == [], f"coa/ is the domain library (Prefect is in flows/, tasks/): {offenders}"


def test_no_first_party_import_is_hidden_in_a_string() -> None:
    """``importlib.import_module("coa.x")`` is an edge the contracts cannot see: import it plainly."""
    hidden = []
    for path in _files(*PACKAGES):
        rel = str(path.relative_to(REPO))
        for line, module, by_name in imported_modules(path.read_text()):
            hides = module == "<dynamic>" or _top(module) in PACKAGES
            if by_name and hides and (rel, module) not in STRING_IMPORTS_ALLOWED:
                hidden.append(f"{rel}:{line} imports {module} by name")
    assert hidden == [], hidden


def test_a_violation_breaks_the_contracts(tmp_path: Path) -> None:
    """A copy of the tree with five deliberate violations: each one is reported, with its line."""
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    violations = {
        # storage -> the runner, inside a function
        "coa/io/__init__.py": "\n\ndef _up() -> None:\n    from coa.steps import run_step  # noqa\n",
        "coa/format/codec.py": "\n\ndef _up() -> None:\n    import prefect  # noqa\n",  # domain -> Prefect
        "coa/llm/tokens.py": "\nimport coa.steps  # noqa\n",  # a library -> the runner
        "coa/rl/tis.py": "\n\ndef _sft() -> None:\n    from coa.train import sft_plan  # noqa\n",  # RL -> SFT
        "coa/kit/guard.py": "\n\ndef _rl() -> None:\n    import coa.rl.family  # noqa\n",  # the kit -> RL
    }
    for rel, extra in violations.items():
        with (tmp_path / rel).open("a") as f:
            f.write(extra)
    done = _lint_imports(tmp_path)
    assert done.returncode == 1, done.stdout[-4000:] + done.stderr[-2000:]
    out = " ".join(done.stdout.split())
    assert "coa.io -> coa.steps" in out
    assert "coa.format.codec -> prefect" in out
    assert "coa.llm.tokens -> coa.steps" in out
    assert "coa.rl.tis -> coa.train.sft_plan" in out.split("RL imports no SFT module")[-1]
    assert "coa.kit.guard -> coa.rl.family" in out
    # the codec's Prefect import also reaches every config through coa.format.prompts: the fourth
    assert "coa.format.codec -> prefect" in out.split("config modules import no implementation")[-1]
    assert "5 broken" in out  # the kit -> RL is one more break of the layers, RL -> SFT its own contract
