"""Where a training stage runs: in this process, or under ``accelerate launch`` (one implementation
for every recipe).

A launched run gets a self-contained resolved config: its input rows written to a Parquet file in
the output folder (atomically; a rerun reuses it), the recipe's data field pointing at that file,
the YAML written atomically too; then ``accelerate launch --config_file <accelerate_config>
[--num_processes N] -m <recipe.module> --config resolved.yaml --output-dir OUT --resume``, under
:mod:`coa.train.kit.guard` in a process group of its own with its own log file (``OUT/train.log``):
the trainer never holds the worker's output pipe, and it is ended with the process that launched it
(interrupted, cancelled or killed) instead of writing on alone. The run resumes from its last
complete checkpoint when a killed stage is rerun. When it fails on purpose, its entry
point (:mod:`coa.train.kit.entry`) leaves its error in ``failure.json`` and the launcher raises the
same error class with the same one-line message here; any other exit is the recipe's error naming
the command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import yaml

from coa.train.kit.recipe import Recipe

FAILURE_FILE = "failure.json"
RESOLVED_FILE = "resolved.yaml"
LOG_FILE = "train.log"


def resolve_launcher(config: Any) -> Literal["in_process", "accelerate"]:
    """Where a training stage runs: its ``launcher``, or by the hardware when ``auto``."""
    if config.launcher != "auto":
        return config.launcher  # type: ignore[no-any-return]
    import torch

    return "accelerate" if torch.cuda.is_available() else "in_process"


def work_dir(store_root: str, artifact_uri: str) -> Path:
    """The checkpoint folder of a model artifact in progress (stable across reruns): under the store
    for a local root, under ``$COA_CACHE_DIR`` (``~/.cache/coa``) for a remote one."""
    from coa import io

    if "://" not in store_root:
        return Path(io.Store(store_root).checkpoint_uri(artifact_uri))
    cache = Path(os.environ.get("COA_CACHE_DIR", Path.home() / ".cache" / "coa"))
    return cache / "checkpoints" / "/".join(artifact_uri.rstrip("/").split("/")[-2:])


def launch_accelerate(
    recipe: Recipe,
    rows: Any,
    config: Any,
    out: Path,
    accelerate_config: str,
    num_processes: int | None = None,
) -> dict[str, Any]:
    """Run ``recipe`` on ``rows`` (a ``pyarrow.Table``) under ``accelerate launch``; its result file's
    JSON. Raises the launched run's own error (see the module doc)."""
    import pyarrow.parquet as pq

    if not Path(accelerate_config).is_file():
        raise recipe.error(
            f"accelerate config {accelerate_config} not found (paths are relative to the repo root)"
        )
    out.mkdir(parents=True, exist_ok=True)
    data = out / recipe.data_file
    if not data.exists():
        tmp = data.with_name(f".{data.name}.tmp")
        pq.write_table(rows, tmp)
        tmp.replace(data)
    resolved = out / RESOLVED_FILE
    tmp = resolved.with_name(f".{resolved.name}.tmp")
    values = config.model_copy(update={recipe.data_field: str(data)}).model_dump(mode="json")
    tmp.write_text(yaml.safe_dump(values, sort_keys=True))
    tmp.replace(resolved)
    failure = out / FAILURE_FILE
    failure.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config]
    if num_processes is not None:
        cmd += ["--num_processes", str(num_processes)]
    cmd += ["-m", recipe.module, "--config", str(resolved), "--output-dir", str(out), "--resume"]
    log_file = out / LOG_FILE
    returncode = run_guarded(cmd, log_file)
    if returncode != 0:
        if failure.is_file():
            said = json.loads(failure.read_text())
            error = recipe.errors().get(said["error"], recipe.error)
            raise error(f"{said['message']} (in `accelerate launch -m {recipe.module}`; its log: {log_file})")
        raise recipe.error(f"`{' '.join(cmd)}` exited with {returncode}; its log: {log_file}")
    return dict(json.loads((out / recipe.result_file).read_text()))


def run_guarded(cmd: list[str], log_file: Path, grace_s: float = 5.0) -> int:
    """Run ``cmd`` under :mod:`coa.train.kit.guard` in a process group of its own, its output appended
    to ``log_file`` (never this process's pipe); its exit status. If this process is interrupted or
    ends the run (Ctrl-C, a cancelled flow run) the group is ended here (SIGTERM, then SIGKILL after
    ``grace_s``); if it is killed outright, the guard ends the group itself."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coa.train.kit.guard", "--", *cmd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            return proc.wait()
        finally:
            if proc.poll() is None:
                _end_group(proc, grace_s)


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
