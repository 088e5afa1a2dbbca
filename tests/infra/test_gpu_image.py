"""The GPU image and the accelerate configs, checked without building or launching anything.

``infra/gpu/Dockerfile``: its Python is one ``requires-python`` admits and its base image ships;
every ``name==version`` it installs is the pin ``pyproject.toml`` holds (dependencies or an extra);
every extra it installs exists; its tag is the default ``image`` of the docker and kubernetes pool
templates; every ``COPY`` source exists; vLLM stays out of the pipeline's environment; no
environment variable it sets is left unread. ``infra/accelerate/*.yaml``: each loads with
accelerate's own config class, and the multi-GPU ones are what their names say (DDP, FSDP2, ZeRO-3).
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "infra" / "gpu" / "Dockerfile"
POOLS = (ROOT / "infra" / "docker" / "gpu-pool.json", ROOT / "infra" / "kubernetes" / "gpu-pool.json")
PIN = re.compile(r"""["']?([A-Za-z0-9_.\-]+)==([0-9][A-Za-z0-9.+\-]*)""")


def _instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined, comments dropped."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m[1].upper(), m[2]) for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pins() -> dict[str, str]:
    """Every ``name==version`` of pyproject.toml: its dependencies and every extra."""
    project = _pyproject()["project"]
    requirements = [
        *project["dependencies"],
        *(r for e in project["optional-dependencies"].values() for r in e),
    ]
    return {m[1].lower().replace("_", "-"): m[2] for r in requirements if (m := PIN.match(r))}


def test_python_is_supported_and_shipped_by_the_base_image() -> None:
    steps = _instructions()
    (base,) = [args for op, args in steps if op == "FROM"]
    assert re.match(r"nvidia/cuda:\d+\.\d+\.\d+-cudnn-devel-ubuntu24\.04$", base), base
    pythons = set(re.findall(r"python3\.(\d+)", " ".join(args for op, args in steps if op == "RUN")))
    assert pythons == {"12"}, f"one Python, Ubuntu 24.04's 3.12; found 3.{pythons}"
    requires = _pyproject()["project"]["requires-python"]
    assert requires == ">=3.11,<3.13"  # 3.12 lies in [3.11, 3.13)


def test_every_pin_the_image_installs_is_pyprojects() -> None:
    run = " ".join(args for op, args in _instructions() if op == "RUN")
    pins = _pins()
    installed = {m[1].lower().replace("_", "-"): m[2] for m in PIN.finditer(run)}
    assert {"torch", "deepspeed", "vllm"} <= set(installed), installed
    wrong = {
        name: (version, pins.get(name)) for name, version in installed.items() if pins.get(name) != version
    }
    assert not wrong, f"the image installs other versions than pyproject.toml pins: {wrong}"
    extras = set(_pyproject()["project"]["optional-dependencies"])
    for group in re.findall(r"""-e\s+['"]?\.\[([^\]]+)\]""", run):
        assert set(group.split(",")) <= extras, group
    assert {"gpu-train", "workers"} <= {e for g in re.findall(r"\.\[([^\]]+)\]", run) for e in g.split(",")}
    # the workers extra brings what the pools' workers import
    assert {"prefect-docker", "prefect-kubernetes", "liger-kernel", "deepspeed"} <= set(pins)
    # vLLM only in its own environment
    (vllm_step,) = [args for op, args in _instructions() if op == "RUN" and "vllm==" in args]
    assert "/opt/vllm/bin/pip install" in vllm_step and "/opt/venv" not in vllm_step


def test_the_tag_is_the_pools_default_image() -> None:
    tags = set(re.findall(r"docker build -f infra/gpu/Dockerfile -t (\S+) \.", DOCKERFILE.read_text()))
    assert len(tags) == 1, tags
    (tag,) = tags
    for pool in POOLS:
        variables = json.loads(pool.read_text())["variables"]["properties"]
        assert variables["image"]["default"] == tag, pool
    version = _pyproject()["project"]["version"]
    assert tag == f"coa-pipeline-gpu:{version}"
    mentioned = subprocess.run(
        ["git", "grep", "-h", "-o", r"coa-pipeline[-:]gpu[:0-9a-z.]*", "--", "infra", "docs", "README.md"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    assert set(mentioned) <= {tag, "coa-pipeline-gpu"}, set(mentioned) - {tag}


def test_every_copy_source_exists_and_every_env_var_is_read() -> None:
    steps = _instructions()
    copies = [args.split()[:-1] for op, args in steps if op == "COPY"]
    assert copies
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
    env = " ".join(args for op, args in steps if op == "ENV")
    for name in re.findall(r"([A-Z_][A-Z0-9_]*)=", env):
        if name in ("PATH",) or name.startswith("PIP_"):
            continue
        readers = subprocess.run(
            ["git", "grep", "-l", name, "--", "coa", "tasks", "flows", "prefect.yaml", "infra/*.sh"],
            cwd=ROOT, capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip
        assert readers, f"the image sets {name}, which nothing reads"


@pytest.mark.parametrize("path", sorted((ROOT / "infra" / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_load_with_accelerates_own_class(path: Path) -> None:
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import DistributedType

    config = ClusterConfig.from_yaml_file(str(path))  # refuses unknown keys and bad values
    expected = {
        "single_gpu.yaml": (DistributedType.NO, 1),
        "ddp.yaml": (DistributedType.MULTI_GPU, 8),
        "fsdp2.yaml": (DistributedType.FSDP, 8),
        "multi_gpu_zero3.yaml": (DistributedType.DEEPSPEED, 8),
    }
    assert (config.distributed_type, config.num_processes) == expected[path.name]
    if path.name == "fsdp2.yaml":
        assert config.fsdp_config["fsdp_version"] == 2
        assert config.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"  # model/ loads anywhere
    if path.name == "multi_gpu_zero3.yaml":
        assert (ROOT / config.deepspeed_config["deepspeed_config_file"]).is_file()
