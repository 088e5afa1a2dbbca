"""The project's wheel installs on Python 3.12 (the lent GPU machines' Python) as well as on 3.11.

The wheel is built from a copy of the sources; pip, asked for a CPython 3.12 x86-64 Linux target
(``--python-version 3.12 --only-binary=:all: --platform manylinux…``, a dry run into a scratch
``--target``), must accept the wheel itself (its ``Requires-Python``), find a 3.12 binary for every
pinned requirement, and resolve the whole dependency graph of the pins that do not need torch.
torch's own graph cannot be resolved from this registry: pip evaluates torch's markers for this
machine (Linux) whatever the target, and the CUDA runtime wheels torch 2.13 then asks for
(``nvidia-cudnn-cu13``, ``cuda-bindings``) are not in it; the GPU image brings its own torch.

The wheel's own checks run offline; the pins' need the package index (about a minute).
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
SOURCES = ("pyproject.toml", "README.md", "coa", "tasks", "schemas", "flows")


def build_wheel(out: Path) -> Path:
    """The project's wheel, built (no isolation: setuptools from this environment) from a copy."""
    src = out / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src), "-w",
         str(out / "dist")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (wheel,) = (out / "dist").glob("coa_pipeline-*.whl")
    return wheel


def dry_run(target: Path, python: str, *requirements: str, deps: bool = True, index: bool = True) -> str:
    """pip's dry-run install for a CPython ``python`` x86-64 Linux target; its stderr (empty: fine)."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--no-cache-dir",
           "--python-version", python, "--implementation", "cp", "--only-binary=:all:",
           "--target", str(target)]  # fmt: skip
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    cmd += [] if deps else ["--no-deps"]
    cmd += [] if index else ["--no-index"]
    proc = subprocess.run([*cmd, *requirements], capture_output=True, text=True, timeout=600)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    return "" if proc.returncode == 0 else "\n".join(errors) or proc.stderr[-2000:]


def requirements(wheel: Path) -> list[str]:
    """The wheel's unconditional ``Requires-Dist`` lines (its pins)."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(name).decode()
    return [m.replace(" ", "") for m in re.findall(r"^Requires-Dist: ([^;\n]+)$", text, re.M)]


def needs_torch(requirement: str, seen: set[str] | None = None) -> bool:
    """Whether an installed requirement needs torch, directly or through its own requirements."""
    name = re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
    seen = set() if seen is None else seen
    if name == "torch":
        return True
    if name in seen:
        return False
    seen.add(name)
    try:
        requires = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return False
    return any(needs_torch(r.split(";")[0], seen) for r in requires if "extra ==" not in r)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_admits_python_3_11_and_3_12_and_not_3_13(wheel: Path, tmp_path: Path) -> None:
    for python in ("3.11", "3.12"):
        assert dry_run(tmp_path / python, python, str(wheel), deps=False, index=False) == "", python
    refused = dry_run(tmp_path / "3.13", "3.13", str(wheel), deps=False, index=False)
    assert "Requires-Python" in refused or "requires a different Python" in refused


@pytest.mark.slow
def test_every_pin_has_a_python_3_12_binary_and_the_torch_free_pins_resolve(
    wheel: Path, tmp_path: Path
) -> None:
    pins = requirements(wheel)
    assert any(p.startswith("torch==") for p in pins) and len(pins) > 20
    assert dry_run(tmp_path / "pins", "3.12", *pins, deps=False) == ""
    torch_free = [p for p in pins if not needs_torch(p)]
    assert "pyarrow==26.0.1" in torch_free and not any(
        p.startswith(("trl==", "accelerate==")) for p in torch_free
    )
    assert dry_run(tmp_path / "graph", "3.12", *torch_free) == ""
