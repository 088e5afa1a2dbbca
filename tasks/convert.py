"""Prefect task: convert curated trajectories into CoA SFT examples and RL prompts."""

from __future__ import annotations

from prefect import get_run_logger, task

from coa import io
from coa.convert.stage import ConvertConfig, run_convert_stage


@task(name="convert")
def convert_task(
    cfg: ConvertConfig, curated: io.ArtifactRef, tasks: io.ArtifactRef, tasks_table: str
) -> io.ArtifactRef:
    """Write ``sft`` (sft.v1), ``rl_prompts`` (rl_prompt.v1) and the ``quarantine``."""
    ref, counts = run_convert_stage(cfg, curated, tasks, tasks_table, io.Store())
    get_run_logger().info("convert: %s -> %s", counts, ref.uri)
    return ref
