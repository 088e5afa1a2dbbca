"""``coa export``: converted data in the formats other trainers read."""

from __future__ import annotations

from typing import Annotated

import typer

from coa._cli.common import _fail


def export_cmd(
    uri: Annotated[str, typer.Argument(help="Artifact from `coa convert`")],
    out: Annotated[str, typer.Argument(help="Output file (afm-sft: .json, afm-rl: .parquet) or folder (hf)")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="afm-sft | afm-rl | hf")] = "hf",
    grammar: Annotated[
        str | None,
        typer.Option(help="afm-sft/afm-rl: mhqa = multi-hop rows in AFM's MHQA grammar (<wiki_search>)"),
    ] = None,
) -> None:
    """Export converted data: AFM alpaca SFT JSON, AFM RL Parquet, or a `datasets`-loadable folder."""
    from coa.convert.export import export

    try:
        typer.echo(export(uri, fmt, out, grammar))
    except ValueError as e:
        raise _fail(str(e)) from None
