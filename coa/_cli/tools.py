"""``coa tool code|search|crawl``: run one tool and print the observation the model would see."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from coa._cli.common import _config, _fail
from coa.config import ConfigError


def _toolbox(config: Path, overrides: list[str] | None) -> Any:
    from coa.collect.config import CollectConfig
    from coa.tools.build import build_toolbox

    cfg = _config(config, overrides)
    tools = (cfg.collect or CollectConfig()).tools.model_copy(update={"record": "off"})
    return build_toolbox(tools, None)


def _run_tool(name: str, argument: str, config: Path, overrides: list[str] | None) -> None:
    import asyncio

    from coa.tools.sandbox import SandboxUnavailable

    try:
        box = _toolbox(config, overrides)
        if name not in box.tools:
            raise _fail(f"tool {name} is not enabled (collect.tools.enabled)")
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
    """Search with the configured web_search provider (default: BM25 over the synthetic encyclopedia)."""
    _run_tool("web_search", query, config, overrides)


def tool_crawl(
    url: Annotated[str, typer.Argument(help="URL (http(s), local://doc/<id>); several separated by ' | '")],
    overrides: Annotated[list[str] | None, typer.Argument(help="Overrides")] = None,
    config: Annotated[Path, _CFG_OPT] = Path("configs/demo.yaml"),
) -> None:
    """Fetch a page and print its readable text as the crawl_page observation."""
    _run_tool("crawl_page", url, config, overrides)
