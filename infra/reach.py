"""Import, now, every module a part of the GPU check will reach, so a missing one costs seconds, not a part.

A part of ``infra/gpu-check.sh`` that stops minutes in at an ``import`` (a wheel not carried, a
module only a late step imports inside a function) loses its figure and the device time before it.
This imports what each part reaches before any part runs:

* every module of the project in the import closure of the part's entry modules
  (:func:`coa.version.closure`: ``import`` statements anywhere in a file, functions included); for
  the ``demo`` part, of the build function of each step the plan would build on the carried store
  (the steps it reuses run nothing);
* every other package those files import inside a function or through :func:`coa.lazy.lazy_module`
  (the imports Python runs only when the code does), except the optional ones: an import inside
  ``try: … except ImportError`` and the packages of the project's extras (``pyproject.toml``:
  Liger's kernels, DeepSpeed, Ray, the trackers), each checked where it is used, with a fallback.

Usage (the environment part of gpu-check.sh; ``--demo`` takes run_plan.py's profile and overrides)::

    python infra/reach.py sft rl [--demo -c configs/demo-gpu.yaml KEY=VALUE ...]

Prints one line per part (modules imported, packages found) and exits 3 naming every import that
failed and the file that needs it.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = {  # the modules each bench part starts from (its own script is checked by running it)
    "sft": ("coa.train.sft", "coa.train.data", "coa.train.kernels", "trl", "datasets"),
    "sft-1.5b": ("coa.train.sft", "coa.train.data", "coa.train.kernels", "trl", "datasets"),
    "sft-sweep": ("coa.train.sft", "coa.train.data", "coa.train.kernels", "trl", "datasets"),
    "rl": ("coa.rl.grpo", "coa.rollout.policies.hf_batched", "coa.rollout.policies.hf", "coa.train.sft"),
    "profile": ("coa.train.sft", "coa.plan.config"),
    "profile-rl": ("coa.rl.grpo", "coa.rollout.policies.hf_batched", "coa.plan.config"),
    "tests": ("pytest", "coa.train.sft", "coa.rl.grpo", "coa.serve.engine"),
}
_OPTIONAL_HANDLERS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
_OWN = ("coa", "schemas", "tasks", "flows")


def optional_packages() -> set[str]:
    """The import names of the packages in the project's extras (``dev`` excepted: tests only)."""
    import re
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0] for key, reqs in extras.items() for req in reqs}
    return {name.lower().replace("-", "_") for name in names}


def deferred_imports(path: Path) -> dict[str, str]:
    """Top-level packages ``path`` imports inside a function or through ``lazy_module`` (not guarded
    by an ``except ImportError``), each with where (``file:line``); the project's own excluded."""
    tree = ast.parse(path.read_text(), str(path))
    found: dict[str, str] = {}
    where = f"{path.relative_to(ROOT)}"

    def visit(node: ast.AST, nested: bool, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            guard = guarded
            if isinstance(child, ast.Try):
                caught = {
                    n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
                    for h in child.handlers
                    for n in ([h.type] if not isinstance(h.type, ast.Tuple) else h.type.elts)
                    if n is not None
                }
                if caught & _OPTIONAL_HANDLERS or any(h.type is None for h in child.handlers):
                    for part in child.body:
                        visit_one(part, inner, True)
                    for rest in (*child.handlers, *child.orelse, *child.finalbody):
                        visit_one(rest, inner, guard)
                    continue
            visit_one(child, inner, guard)

    def visit_one(child: ast.AST, nested: bool, guarded: bool) -> None:
        names: list[str] = []
        if isinstance(child, ast.Import) and nested:
            names = [alias.name for alias in child.names]
        elif isinstance(child, ast.ImportFrom) and nested and child.level == 0 and child.module:
            names = [child.module]
        elif (
            isinstance(child, ast.Call)
            and getattr(child.func, "id", None) == "lazy_module"
            and child.args
            and isinstance(child.args[0], ast.Constant)
        ):
            names = [str(child.args[0].value)]
        for name in names:
            top = name.split(".")[0]
            if (
                not guarded
                and top not in sys.stdlib_module_names
                and top not in ("coa", "schemas", "tasks", "flows")
            ):
                found.setdefault(top, f"{where}:{getattr(child, 'lineno', 0)}")
        visit(child, nested or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef), guarded)

    visit(tree, False, False)
    return found


def demo_modules(argv: list[str]) -> tuple[str, ...]:
    """The build modules of the steps the demo's plan would build on the store (``COA_STORAGE_ROOT``)."""
    from coa import io
    from coa.plan import plan
    from coa.plan.config import load_pipeline_config
    from coa.plan.preview import preview

    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", default="configs/demo-gpu.yaml")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    steps = plan(load_pipeline_config(args.config, args.overrides))
    built = {p.name for p in preview(steps, io.Store()) if not p.status.startswith("reuse")}
    return tuple(sorted({s.stage.build.__module__ for s in steps if s.name in built}))


def reach(entries: tuple[str, ...]) -> tuple[int, list[str], list[str]]:
    """Import ``entries``, the project modules in their closure and the packages those import late;
    (modules imported, failures, warnings). A module of the closure that does not import is a failure;
    a package imported inside a function that does not is a warning (``module (needed by file:line)``):
    the function may be one the part never calls (the crawl tool, a tracker, a benchmark's grader),
    which the twin's end-to-end run of every part settles."""
    from coa.version import closure

    failures: list[str] = []
    warnings: list[str] = []
    modules: set[str] = set()
    late: dict[str, str] = {}
    for entry in entries:
        try:
            importlib.import_module(entry)
        except Exception as e:
            failures.append(f"{entry}: {type(e).__name__}: {e}")
            continue
        if entry.split(".")[0] not in ("coa", "schemas"):
            continue
        for path in closure(entry):
            if path.suffix != ".py":
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            modules.add(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
            for name, where in deferred_imports(path).items():
                late.setdefault(name, where)
    for module in sorted(modules):
        try:
            importlib.import_module(module)
        except Exception as e:
            failures.append(f"{module}: {type(e).__name__}: {e}")
    optional = optional_packages()
    for name, where in sorted(late.items()):
        if name in optional:
            continue
        try:
            importlib.import_module(name)
        except Exception as e:
            warnings.append(f"{name} (imported inside a function, {where}): {type(e).__name__}: {e}")
    return len(modules) + len(late), failures, warnings


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    demo = argv[argv.index("--demo") + 1 :] if "--demo" in argv else None
    parts = argv[: argv.index("--demo")] if "--demo" in argv else argv
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"error: unknown part(s) {', '.join(unknown)}: {', '.join(PARTS)} or --demo", file=sys.stderr)
        return 2
    failed = False
    todo = [(p, PARTS[p]) for p in parts]
    if demo is not None:
        todo.append(("demo", demo_modules(demo)))
    for name, entries in todo:
        began = time.monotonic()
        count, failures, warnings = reach(entries)
        print(
            f"reach {name}: {count} modules and packages imported in {time.monotonic() - began:.1f} s",
            flush=True,
        )
        for failure in failures:
            print(f"error: part {name!r} would fail: {failure}", flush=True)
        for warning in warnings:
            print(f"warning: part {name!r} would fail if it ran: {warning}", flush=True)
        failed |= bool(failures)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
