"""The command line of every recipe: ``python -m <recipe> --config resolved.yaml [--data ROWS]
[--output-dir DIR] [--resume] [key=value ...]``, the same under ``accelerate launch`` or ``torchrun``.

Exit codes: 0 the run finished and its result is sound; 1 a check failed (the steps-run guard, an
entropy collapse, a non-finite loss or reward); 2 bad input (a config error, no rows, a folder that
cannot be resumed). A deliberate failure also goes to ``failure.json`` in the output folder (rank 0),
which :func:`coa.kit.launch.launch_accelerate` turns back into the same error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coa.errors import CheckFailed, CoaError
from coa.kit.launch import FAILURE_FILE
from coa.kit.recipe import Recipe
from coa.kit.run import write_json

RunFn = Callable[[Any, str | None, bool], Any]
"""``run(config, output_dir, resume) -> result``: loads the rows the config names and trains."""


def main(
    recipe: Recipe,
    argv: Sequence[str] | None,
    *,
    config_model: type[Any],
    run: RunFn,
    description: str,
    summary: Callable[[Any], dict[str, Any]],
    unsound: Callable[[Any], str | None],
) -> int:
    """Parse the command line, run, print ``summary(result)`` as JSON (rank 0); see the module doc.

    ``unsound(result)`` names what makes a finished run's result unusable (a non-finite loss), if
    anything.
    """
    from coa.config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog=f"python -m {recipe.module}", description=description)
    parser.add_argument("--config", required=True, help=f"YAML with the {config_model.__name__} fields")
    parser.add_argument("--data", help=f"the input rows (overrides `{recipe.data_field}`)")
    parser.add_argument("--output-dir", help="output folder (overrides `output_dir`)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint if any")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. max_steps=200")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(ns.config, ns.overrides, model=config_model)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    if ns.data is not None:
        config = config.model_copy(update={recipe.data_field: ns.data})
    if getattr(config, recipe.data_field) is None:
        print(f"no input rows: give --data or set `{recipe.data_field}` in the config", file=sys.stderr)
        return 2
    rank0 = int(os.environ.get("RANK", "0")) == 0
    try:
        result = run(config, ns.output_dir, ns.resume)
    except CoaError as e:
        print(f"{'check failed' if isinstance(e, CheckFailed) else 'error'}: {e}", file=sys.stderr)
        out = ns.output_dir or config.output_dir
        if rank0 and out is not None:
            write_json(Path(out) / FAILURE_FILE, {"error": type(e).__name__, "message": str(e)})
        return 1 if isinstance(e, CheckFailed) else 2
    finally:
        _end_process_group()
    if rank0:
        print(json.dumps(summary(result), indent=2, sort_keys=True))
    problem = unsound(result)
    if problem is not None:
        print(f"check failed: {problem}", file=sys.stderr)
        return 1
    return 0


def _end_process_group() -> None:
    """Under torchrun / accelerate: wait for every rank, then tear the group down before exit
    (a live gloo/NCCL group at interpreter shutdown can abort a rank with SIGABRT)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
