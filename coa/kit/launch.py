"""Where a training stage runs: in this process, or launched under ``accelerate launch`` or
``torchrun`` (one implementation for every recipe).

A launched run gets a self-contained resolved config: its input rows written to a Parquet file in
the output folder (atomically; a rerun reuses it), the recipe's data field pointing at that file,
the YAML written atomically too; then ``accelerate launch --config_file <accelerate_config>
[--num_processes N] -m <recipe.module> --config resolved.yaml --output-dir OUT --resume`` (or
``torchrun --standalone --nproc_per_node N -m <recipe.module> ...``: plain DDP, gloo on CPU), under
:mod:`coa.kit.guard` in a process group of its own with its own log file (``OUT/train.log``):
the trainer never holds the worker's output pipe, and it is ended with the process that launched it
(interrupted, cancelled or killed) instead of writing on alone. The run resumes from its last
complete checkpoint when a killed stage is rerun. When it fails on purpose, its entry
point (:mod:`coa.kit.entry`) leaves its error in ``failure.json`` and the launcher raises the
same error class with the same one-line message here; any other exit is the recipe's error naming
the command and, when a rank died (torchrun's multi-line ``ChildFailedError`` report in the log),
which rank and how, in one line (:func:`rank_failure`). The resolved config is the same for any
number of ranks: its batch is the global batch, which the ranks share (:mod:`coa.kit.ranks`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml

from coa.kit.recipe import Recipe

Progress = Callable[[int, int], None]
"""``progress(done, planned)``, as :data:`coa.steps.Progress` (this module stays below the runner)."""

FAILURE_FILE = "failure.json"
RESOLVED_FILE = "resolved.yaml"
LOG_FILE = "train.log"


Launcher = Literal["in_process", "accelerate", "torchrun"]


def resolve_launcher(config: Any) -> Launcher:
    """Where a training stage runs: its ``launcher``, or by the hardware when ``auto`` (always launched
    on several nodes: ``accelerate``)."""
    if config.launcher != "auto":
        return config.launcher  # type: ignore[no-any-return]
    if getattr(config, "nodes", 1) > 1:
        return "accelerate"
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


def launch(
    recipe: Recipe, rows: Any, config: Any, out: Path, stage: Any, progress: Progress | None = None
) -> dict[str, Any]:
    """Run ``recipe`` as the stage config ``stage`` says (``launcher`` accelerate or torchrun,
    ``accelerate_config``, ``num_processes``, ``nodes``); its result file's JSON. ``progress`` gets the
    run's steps done of planned (and its live figures) from rank 0's progress file while it runs."""
    if getattr(stage, "nodes", 1) > 1:
        return launch_nodes(recipe, rows, config, out, stage, progress=progress)
    if resolve_launcher(stage) == "torchrun":
        return launch_torchrun(recipe, rows, config, out, stage.num_processes or 1, progress=progress)
    return launch_accelerate(
        recipe, rows, config, out, stage.accelerate_config, stage.num_processes, progress=progress
    )


def launch_accelerate(
    recipe: Recipe,
    rows: Any,
    config: Any,
    out: Path,
    accelerate_config: str,
    num_processes: int | None = None,
    timeout_s: float | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run ``recipe`` on ``rows`` (a ``pyarrow.Table``) under ``accelerate launch``; its result file's
    JSON. Raises the launched run's own error (see the module doc), or the recipe's error when the run
    is still going after ``timeout_s`` (it is then ended)."""
    check_accelerate_config(recipe, accelerate_config, num_processes)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config]
    if num_processes is not None:
        cmd += ["--num_processes", str(num_processes)]
    return _launch(recipe, rows, config, out, cmd, "accelerate launch", timeout_s, progress)


def launch_torchrun(
    recipe: Recipe,
    rows: Any,
    config: Any,
    out: Path,
    num_processes: int,
    timeout_s: float | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run ``recipe`` on ``rows`` under ``torchrun --standalone --nproc_per_node num_processes`` (a
    free rendezvous port; DDP over NCCL with CUDA, gloo on CPU); as :func:`launch_accelerate`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += ["--nproc_per_node", str(num_processes)]
    return _launch(recipe, rows, config, out, cmd, "torchrun", timeout_s, progress)


def launch_nodes(
    recipe: Recipe,
    rows: Any,
    config: Any,
    out: Path,
    stage: Any,
    timeout_s: float | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run ``recipe`` on ``stage.nodes`` machines as their node 0 (:mod:`coa.kit.nodes`): the launch
    announced to the other nodes' agents, ``stage.num_processes`` ranks per node, the rendezvous from
    the environment; as :func:`launch_accelerate`."""
    from coa.kit import nodes

    torchrun = resolve_launcher(stage) == "torchrun"
    how: Literal["torchrun", "accelerate"] = "torchrun" if torchrun else "accelerate"
    per_node = stage.num_processes or 1
    if how == "accelerate":
        check_accelerate_config(recipe, stage.accelerate_config, stage.nodes * per_node)
    try:
        planned = nodes.plan(how, stage.nodes, per_node, stage.accelerate_config, out)
    except nodes.NodesError as e:
        raise recipe.error(f"{recipe.name}.nodes is {stage.nodes}: {e}") from None
    label = f"{'torchrun' if how == 'torchrun' else 'accelerate launch'} on {stage.nodes} nodes"
    return _launch(recipe, rows, config, out, [], label, timeout_s, progress, on_nodes=planned)


def check_accelerate_config(recipe: Recipe, accelerate_config: str, num_processes: int | None) -> None:
    """Refuse a missing accelerate config, or several processes under a one-process config (accelerate
    would start one process, which would train alone)."""
    path = Path(accelerate_config)
    if not path.is_file():
        raise recipe.error(
            f"accelerate config {accelerate_config} not found (paths are relative to the repo root)"
        )
    values = yaml.safe_load(path.read_text()) or {}
    if (num_processes or 1) > 1 and str(values.get("distributed_type", "NO")) == "NO":
        raise recipe.error(
            f"{accelerate_config} runs one process (distributed_type: NO) but {recipe.name}.num_processes "
            f"is {num_processes}: set {recipe.name}.accelerate_config to infra/accelerate/ddp.yaml (to ~3B "
            "parameters), fsdp2.yaml or multi_gpu_zero3.yaml"
        )


def _launch(
    recipe: Recipe,
    rows: Any,
    config: Any,
    out: Path,
    prefix: list[str],
    how: str,
    timeout_s: float | None,
    progress: Progress | None = None,
    on_nodes: Any = None,
) -> dict[str, Any]:
    """Write the run's files, run it, read its result; ``progress`` reads rank 0's progress file while it
    runs; ``on_nodes`` (a :class:`~coa.kit.nodes.Launch`) runs it as node 0 of several, announced
    to the others while it runs."""
    import pyarrow.parquet as pq

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
    cmd = [*prefix, "-m", recipe.module, "--config", str(resolved), "--output-dir", str(out), "--resume"]
    announce: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    watch: Callable[[], str | None] | None = None
    if on_nodes is not None:
        from coa.kit import nodes

        on_nodes = dataclasses.replace(on_nodes, args=tuple(cmd))
        cmd, announce = on_nodes.command(0), nodes.announced(on_nodes)
        watch = nodes.Heartbeats(nodes.rendezvous().nodes_dir, on_nodes, 0).check
    log_file = out / LOG_FILE
    offset = log_file.stat().st_size if log_file.exists() else 0
    relay = None
    if progress is not None:
        from coa.kit.callbacks import PROGRESS_FILE, ProgressRelay

        relay = ProgressRelay(out / PROGRESS_FILE, progress)
    try:
        with announce:
            returncode = run_guarded(
                cmd, log_file, timeout_s=timeout_s, poll=relay.poll if relay else None, watch=watch
            )
    except nodes_silent() as e:
        raise recipe.error(f"`{how} -m {recipe.module}` ended: {e}; rerun the stage to resume from the last "
                           f"checkpoint; its log: {log_file}") from None  # fmt: skip
    except subprocess.TimeoutExpired:
        raise recipe.error(
            f"`{how} -m {recipe.module}` was still running after {timeout_s:g} s and was ended; its log: "
            f"{log_file}"
        ) from None
    if returncode != 0:
        if failure.is_file():
            said = json.loads(failure.read_text())
            error = recipe.errors().get(said["error"], recipe.error)
            raise error(f"{said['message']} (in `{how} -m {recipe.module}`; its log: {log_file})")
        with log_file.open("rb") as log:
            log.seek(offset)
            died = rank_failure(log.read().decode(errors="replace"))
        why = f": {died}" if died else ""
        raise recipe.error(
            f"`{how} -m {recipe.module}` exited with {returncode}{why}; rerun the stage to resume from "
            f"the last checkpoint; its log: {log_file}"
        )
    return dict(json.loads((out / recipe.result_file).read_text()))


_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(?P<rank>\d+).*?exitcode\s*:\s*(?P<code>-?\d+)"
    r".*?traceback\s*:\s*(?P<why>[^\n]*)",
    re.DOTALL,
)


def rank_failure(log_text: str) -> str | None:
    """torchrun's report of a failed run (its ``ChildFailedError`` block, also under ``accelerate
    launch``) in one line: which rank failed first, its exit code and why; None if the log has none."""
    found = _ROOT_CAUSE.search(log_text)
    if found is None:
        return None
    why = found["why"].strip()
    if why.startswith("To enable traceback"):  # an exception: torchrun points at its own docs instead
        why = "it raised an error; its traceback is in the log above the report"
    return f"rank {found['rank']} failed first with exit code {found['code']} ({why})"


def nodes_silent() -> type[Exception]:
    """The error :func:`run_guarded` raises when its ``watch`` ends a run (imported late: one machine's
    launches never load the multi-node module)."""
    from coa.kit.nodes import NodeSilent

    return NodeSilent


def run_guarded(
    cmd: list[str],
    log_file: Path,
    grace_s: float = 5.0,
    timeout_s: float | None = None,
    poll: Callable[[], None] | None = None,
    poll_s: float = 1.0,
    watch: Callable[[], str | None] | None = None,
) -> int:
    """Run ``cmd`` under :mod:`coa.kit.guard` in a process group of its own, its output appended
    to ``log_file`` (never this process's pipe); its exit status. If this process is interrupted or
    ends the run (Ctrl-C, a cancelled flow run) the group is ended here (SIGTERM, then SIGKILL after
    ``grace_s``); if it is killed outright, the guard ends the group itself. Past ``timeout_s`` the
    group is ended and ``subprocess.TimeoutExpired`` raised. ``poll`` is called every ``poll_s`` while
    it runs, in this thread (the launching step relays the run's progress), and once at its end.
    ``watch`` (a node's :class:`~coa.kit.nodes.Heartbeats` check) is called as often: when it
    returns a reason the run is ended (its group and every process it started, also in sessions of
    their own, as torchrun starts its workers) and :class:`~coa.kit.nodes.NodeSilent` raised."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coa.kit.guard", "--", *cmd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while True:
                wait = poll_s if poll is not None or watch is not None else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    wait = left if wait is None else min(wait, left)
                try:
                    code = proc.wait(timeout=max(0.0, wait) if wait is not None else None)
                except subprocess.TimeoutExpired:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
                    if poll is not None:
                        poll()
                    reason = watch() if watch is not None else None
                    if reason is not None:
                        print(f"coa: {reason}", file=sys.stderr, flush=True)
                        _end_group(proc, grace_s)
                        raise nodes_silent()(reason) from None
                    continue
                if poll is not None:
                    poll()
                return code
        finally:
            if proc.poll() is None:
                _end_group(proc, grace_s)


def _end_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the guard's group, then SIGKILL it after ``grace_s``; the processes it started in
    sessions of their own (torchrun's workers) get the same signals, so none is left waiting."""
    started = descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def descendants(root: int) -> list[int]:
    """Every process under ``root`` (Linux ``/proc``; empty elsewhere), read once."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
