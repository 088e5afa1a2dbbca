"""``coa tool code|search|crawl``: run one tool and print the observation the model would see."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from coa._cli.common import _config, _fail
from coa.config import ConfigError


def _toolbox(name: str, config: Path, overrides: list[str] | None) -> Any:
    """The profile's collect.tools tool ``name`` alone; a local search serves the encyclopedia of its
    synthetic section (the one its steps are handed), generated here in memory."""
    from coa.collect.config import CollectConfig
    from coa.tools.build import build_toolbox
    from coa.tools.collection import Collection

    cfg = _config(config, overrides)
    tools = (cfg.collect or CollectConfig()).tools
    if name not in tools.enabled:
        raise _fail(f"tool {name} is not enabled (collect.tools.enabled)")
    tools = tools.model_copy(update={"record": "off", "enabled": (name,)})
    collection = None
    if cfg.synthetic is not None:
        from coa.synthetic import encyclopedia_table

        syn = cfg.synthetic
        collection = Collection.from_table(encyclopedia_table(syn.encyclopedia_seed, syn.encyclopedia_size))
    return build_toolbox(tools, None, collection=collection, fix="collect.tools")


def _run_tool(name: str, argument: str, config: Path, overrides: list[str] | None) -> None:
    import asyncio

    from coa.tools.sandbox import SandboxUnavailable

    try:
        box = _toolbox(name, config, overrides)
        result = asyncio.run(box.call(name, argument))
    except (ConfigError, SandboxUnavailable) as e:
        raise _fail(str(e)) from None
    typer.echo(result.observation)
    if result.error:
        raise typer.Exit(1)


_CFG_OPT = typer.Option(
    "--config", "-c", help="YAML profile whose collect.tools section configures the tools"
)


def tool_code(
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Overrides, e.g. collect.tools.code.wall_seconds=5")
    ] = None,
    config: Annotated[Path, _CFG_OPT] = Path("configs/demo.yaml"),
) -> None:
    """Run Python read from stdin in the sandbox (fenced ```python blocks or plain code)."""
    _run_tool("code", sys.stdin.read(), config, overrides)


def tool_search(
    query: Annotated[str, typer.Argument(help="Search query")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides")] = None,
    config: Annotated[Path, _CFG_OPT] = Path("configs/demo.yaml"),
) -> None:
    """Search with the configured web_search provider (default: BM25 over the profile's synthetic
    encyclopedia)."""
    _run_tool("web_search", query, config, overrides)


def tool_crawl(
    url: Annotated[str, typer.Argument(help="URL (http(s), local://doc/<id>); several separated by ' | '")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides")] = None,
    config: Annotated[Path, _CFG_OPT] = Path("configs/demo.yaml"),
) -> None:
    """Fetch a page and print its readable text as the crawl_page observation."""
    _run_tool("crawl_page", url, config, overrides)
