"""The tools the agents and the student call, from one config: search, crawl, code in the sandbox.

:class:`ToolsConfig` says which tools exist and where their answers come from; :func:`build_toolbox`
builds the :class:`~coa.tools.toolbox.FunctionToolBox` that collection, evaluation and RL call
(with the observation store for record/replay).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from coa.config import StrictModel
from coa.tools.code import make_code_tool
from coa.tools.crawl import CrawlConfig, make_crawl_tool
from coa.tools.sandbox import SandboxConfig
from coa.tools.search import BlockingSearch, LocalBM25Search, make_web_search_tool, make_wiki_search_tool
from coa.tools.search_providers import SearchConfig, build_search_provider
from coa.tools.toolbox import FunctionToolBox, ObservationStore


class CodeToolConfig(StrictModel):
    """Limits of the sandboxed code tool."""

    cpu_seconds: float = Field(default=10.0, gt=0, description="CPU seconds per program.")
    wall_seconds: float = Field(default=20.0, gt=0, description="Wall seconds per program.")
    memory_mb: int = Field(default=2048, ge=64, description="Address-space limit in MiB.")
    max_chars: int = Field(default=1536, ge=100, description="Observation length (middle-truncated).")


class ToolsConfig(StrictModel):
    """The tools the agents get and where their answers come from."""

    enabled: tuple[Literal["web_search", "wiki_search", "crawl_page", "code"], ...] = Field(
        default=("web_search", "crawl_page", "code"), description="Tools the agents may call."
    )
    search: SearchConfig = Field(default_factory=SearchConfig, description="Provider behind web_search.")
    wiki: SearchConfig = Field(
        default_factory=lambda: SearchConfig(top_k=3), description="Provider behind wiki_search."
    )
    encyclopedia_seed: int = Field(
        default=0, description="Synthetic encyclopedia served by local_bm25 search."
    )
    encyclopedia_entities: int = Field(
        default=300, ge=24, description="Entities in the synthetic encyclopedia."
    )
    crawl: CrawlConfig = Field(default_factory=CrawlConfig, description="Crawler settings.")
    code: CodeToolConfig = Field(default_factory=CodeToolConfig, description="Sandbox limits.")
    record: Literal["off", "record", "replay", "auto"] = Field(
        default="auto", description="Observation store: reuse recorded results (auto), only replay, or off."
    )


def build_toolbox(
    config: ToolsConfig, storage_root: str | None, blocked_hosts: Sequence[str] = ()
) -> FunctionToolBox:
    """The agents' tools, with the observation store under ``storage_root`` unless record=off.

    ``blocked_hosts`` (the evaluation's leak guard): search hits and crawls at these
    ``host/path-prefix`` locations are dropped; the providers' names (the observation store's keys)
    then carry a hash of the list, so an unguarded recording is never replayed.
    """
    functions: dict[str, Any] = {}
    providers: dict[str, str] = {}
    local: LocalBM25Search | None = None

    def local_collection() -> LocalBM25Search:
        nonlocal local
        if local is None:
            from coa.synthetic import build_encyclopedia

            local = LocalBM25Search(
                build_encyclopedia(config.encyclopedia_seed, config.encyclopedia_entities)
            )
        return local

    def provider_for(search: SearchConfig) -> Any:
        if search.provider == "local_bm25" and search.index_dir is None:
            provider: Any = local_collection()
        else:
            provider = build_search_provider(search)
        return BlockingSearch(provider, blocked_hosts) if blocked_hosts else provider

    corpus = f"synthetic-encyclopedia(seed={config.encyclopedia_seed},n={config.encyclopedia_entities})"
    if "web_search" in config.enabled:
        functions["web_search"] = make_web_search_tool(provider_for(config.search), config.search.top_k)
        providers["web_search"] = config.search.provider + (
            ":" + corpus if config.search.provider == "local_bm25" else ""
        )
    if "wiki_search" in config.enabled:
        functions["wiki_search"] = make_wiki_search_tool(provider_for(config.wiki), config.wiki.top_k)
        providers["wiki_search"] = config.wiki.provider + (
            ":" + corpus if config.wiki.provider == "local_bm25" else ""
        )
    if "crawl_page" in config.enabled:
        functions["crawl_page"] = make_crawl_tool(
            config=config.crawl, local_docs=local_collection(), blocked=tuple(blocked_hosts)
        )
        providers["crawl_page"] = f"crawl:{corpus}"
    if "code" in config.enabled:
        sandbox = SandboxConfig(
            cpu_seconds=config.code.cpu_seconds,
            wall_seconds=config.code.wall_seconds,
            memory_mb=config.code.memory_mb,
        )
        functions["code"] = make_code_tool(sandbox, config.code.max_chars)
        providers["code"] = "bwrap-sandbox"
    if blocked_hosts:
        guard = hashlib.sha256("\n".join(blocked_hosts).encode()).hexdigest()[:8]
        for name in ("web_search", "wiki_search", "crawl_page"):
            if name in providers:
                providers[name] += f"+blocked:{guard}"
    store = None
    if config.record != "off" and storage_root is not None:
        store = ObservationStore(storage_root, mode=config.record)
    return FunctionToolBox(functions, providers, store)
