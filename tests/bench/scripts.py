"""Loading a ``bench/`` script (not a package) as a module, for its tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "bench") not in sys.path:  # the scripts import their siblings (the harness) by bare name
    sys.path.insert(0, str(REPO / "bench"))


def load_script(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as the module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_bench(name: str, argv: list[str]) -> dict[str, Any]:
    """``python bench/<name>.py *argv`` in this process, through the harness: the run's record."""
    script = load_script(name)
    harness = load_script("harness")
    return harness.main(
        script.run, script.__doc__, extra=getattr(script, "arguments", None), argv=argv, name=name
    )
