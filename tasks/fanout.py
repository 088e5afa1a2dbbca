"""Shards of a step as Prefect tasks on a Ray cluster, through ``prefect-ray``'s ``RayTaskRunner``.

:func:`executor` turns ``execution`` (:class:`coa.execution.ExecutionConfig`) into what a step's
build receives: nothing for ``engine: local`` (one process, as always), a :class:`RayExecutor` for
``engine: ray``. The executor connects on its first shard and stays connected for the whole run:

* to ``execution.address``, else ``RAY_ADDRESS``, else a local Ray started on the fly (and shut
  down at the end of the run); a Ray already initialised in this process is used as it is;
* every shard is one Prefect task run (``collect-shard-3`` …) executed by a Ray worker; Ray re-runs
  a shard whose worker died (``execution.max_retries``) and the re-run resumes from the shard's
  checkpoints; a shard that raises fails its task run and the step, after the other shards ended;
* the shards report to the driver's Prefect API: ``PREFECT_API_URL``, or the temporary server of a
  run without one (without it each Ray worker would start a server of its own); a remote cluster
  needs a Prefect server both reach.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from prefect import task
from prefect.cache_policies import NO_CACHE

from coa.execution import ExecutionConfig, ShardExecutor

T = TypeVar("T")
R = TypeVar("R")

PASSED_ENV = ("COA_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
"""Infrastructure variables (no secrets) the shards get from the driver, beside the Prefect API (shards
get every URI spelled out, so the storage root itself need not travel)."""


@task(name="shard", task_run_name="{name}-{index}", cache_policy=NO_CACHE, log_prints=False)
def shard_task(fn: Callable[[Any], Any], item: Any, name: str, index: int) -> Any:
    """One shard of a step: ``fn(item)`` on a Ray worker."""
    return fn(item)


def prefect_api_url() -> str:
    """The Prefect API this process reports to (starting the temporary local server if it has none)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        return str(url)
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    return server.api_url


class RayExecutor:
    """A :class:`coa.execution.ShardExecutor` running each shard as a Prefect task on Ray."""

    def __init__(self, config: ExecutionConfig) -> None:
        self.config = config
        self._runner: Any = None
        self._env: dict[str, str] = {}

    @property
    def shards(self) -> int:
        return self.config.shards

    @property
    def flush_seconds(self) -> float:
        return self.config.flush_seconds

    @property
    def address(self) -> str:
        """The cluster to connect to; ``local`` starts one for this run."""
        return self.config.address or os.environ.get("RAY_ADDRESS") or "local"

    def _start(self) -> Any:
        if self._runner is not None:
            return self._runner
        from prefect_ray.task_runners import RayTaskRunner

        init: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
        if self.address == "local":
            init.update(num_cpus=self.config.num_cpus, _node_ip_address="127.0.0.1")
        self._env = {
            "PREFECT_API_URL": prefect_api_url(),
            "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
        }
        self._env.update({k: os.environ[k] for k in PASSED_ENV if os.environ.get(k)})
        runner = RayTaskRunner(address=self.address, init_kwargs=init)
        runner.__enter__()
        self._runner = runner
        return runner

    def map(self, fn: Callable[[T], R], items: Sequence[T], name: str) -> list[R]:
        if not items:
            return []
        from prefect_ray.context import remote_options

        runner = self._start()
        options = {"max_retries": self.config.max_retries, "runtime_env": {"env_vars": self._env}}
        with remote_options(**options):
            futures = [
                runner.submit(shard_task, {"fn": fn, "item": item, "name": name, "index": i})
                for i, item in enumerate(items)
            ]
        for future in futures:  # every shard has ended (and checkpointed) before a failure is raised
            future.wait()
        return [future.result() for future in futures]

    def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            runner.__exit__(None, None, None)


@contextlib.contextmanager
def executor(config: ExecutionConfig) -> Iterator[ShardExecutor | None]:
    """The executor for ``config`` (None for the local engine), closed at the end of the block."""
    if config.engine == "local":
        yield None
        return
    ray = RayExecutor(config)
    try:
        yield ray
    finally:
        ray.close()
