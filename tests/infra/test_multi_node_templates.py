"""The multi-node job templates of infra/ (docs/how-to/multi-node.md): the Kubeflow PyTorchJob gang and
the Slurm sbatch gang, parsed and their fields checked against what the code reads; the PyTorchJob
Worker's command is run as its pod would run it (the operator's RANK / WORLD_SIZE given) and the node
agent it starts must take its node rank and the rendezvous from that environment and exit cleanly."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from coa.kit import node, nodes

ROOT = Path(__file__).resolve().parents[2]
PYTORCHJOB = ROOT / "infra" / "kubernetes" / "pytorchjob-gang.yaml"
SBATCH = ROOT / "infra" / "slurm" / "gpu-gang.sbatch"


def _gpu_pool() -> str:
    """The work pool of the run-one-step/gpu deployment (prefect.yaml)."""
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    return str(next(d["work_pool"]["name"] for d in deployments if d["name"] == "gpu"))


def _agent_args(command: str) -> list[str]:
    """The node agent's arguments in a shell command line (after ``-m coa.kit.node``)."""
    found = re.search(r"-m coa\.kit\.node([^\n']*)", command)
    assert found, command
    return shlex.split(found[1])


def _replica(job: dict[str, Any], kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = job["spec"]["pytorchReplicaSpecs"][kind]
    return spec, spec["template"]["spec"]


def test_the_pytorchjob_gang_is_a_prefect_worker_and_node_agents_on_one_shared_volume() -> None:
    job = yaml.safe_load(PYTORCHJOB.read_text())
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    master, master_pod = _replica(job, "Master")
    worker, worker_pod = _replica(job, "Worker")
    assert master["replicas"] == 1 and worker["replicas"] >= 1
    env: dict[str, dict[str, Any]] = {}
    for kind, pod in (("Master", master_pod), ("Worker", worker_pod)):
        (container,) = pod["containers"]
        assert container["name"] == "pytorch"  # the container the training operator sets the env of
        command = " ".join(container["args"])
        assert 'export COA_NODE_RANK="$RANK" && unset RANK WORLD_SIZE' in command
        env[kind] = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["volumes"]
            if "persistentVolumeClaim" in v
        }
        shared = [mounts[name] for name in claims if name in mounts]
        assert shared and all(
            env[kind][k].startswith(shared[0] + "/") for k in ("COA_NODES_DIR", "COA_STORAGE_ROOT")
        )
        assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert f"prefect worker start --pool {_gpu_pool()} --type process" in " ".join(
        master_pod["containers"][0]["args"]
    )
    node.parser().parse_args(_agent_args(" ".join(worker_pod["containers"][0]["args"])))
    assert env["Master"]["COA_NODES_DIR"] == env["Worker"]["COA_NODES_DIR"]  # one announcement folder
    assert env["Master"]["COA_STORAGE_ROOT"] == env["Worker"]["COA_STORAGE_ROOT"]


def test_the_pytorchjob_worker_command_starts_an_agent_of_the_pods_rank(tmp_path: Path) -> None:
    """The Worker's shell command, run with the variables the operator sets for worker pod 0 (RANK 1 of
    WORLD_SIZE 2), starts the agent as node 1 at MASTER_ADDR:MASTER_PORT; with no launch it exits 0."""
    job = yaml.safe_load(PYTORCHJOB.read_text())
    _, pod = _replica(job, "Worker")
    (container,) = pod["containers"]
    command = " ".join(container["args"]).replace("exec python", f"exec {shlex.quote(sys.executable)}")
    command = command.replace("--idle-exit-s 86400", "--idle-exit-s 0.5")
    env = {k: v for k, v in os.environ.items() if k not in nodes.NODE_RANK_ENVS and k != nodes.ENDPOINT_ENV}
    env |= {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env |= {"COA_NODES_DIR": str(tmp_path / "nodes"), "PYTHONPATH": str(ROOT)}
    env |= {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "coa-gpu-gang-master-0", "MASTER_PORT": "23456"}
    done = subprocess.run(
        container["command"] + [command], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "node 1: no launch for 0.5 s; exiting" in done.stdout


def test_the_sbatch_gang_runs_the_worker_on_node_0_and_agents_elsewhere() -> None:
    text = SBATCH.read_text()
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)
    directives = dict((m[1], m[2]) for m in re.finditer(r"^#SBATCH --([a-z-]+)=(\S+)", text, re.MULTILINE))
    assert int(directives["nodes"]) >= 2 and directives["ntasks-per-node"] == "1"
    assert int(directives["gpus-per-node"]) >= 1
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text  # node 0 hosts the rendezvous
    assert "export MASTER_PORT" in text and "export COA_NODES_DIR" in text
    assert '"$SLURM_NODEID" = 0' in text and "SLURM_NODEID" in nodes.NODE_RANK_ENVS
    assert f"prefect worker start --pool {_gpu_pool()} --type process" in text
    node.parser().parse_args(_agent_args(text))
