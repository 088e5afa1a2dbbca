"""Building the tools a :class:`~coa.tools.config.ToolsConfig` names: :func:`build_toolbox` gives the
:class:`~coa.tools.toolbox.FunctionToolBox` (search, crawl, code in the sandbox, the observation store
for record/replay) that collection, evaluation, sampling and RL call. The config is
:mod:`coa.tools.config` (which imports none of this); the local search's documents are the
:class:`~coa.tools.collection.Collection` the step hands over (its ``encyclopedia`` input), never
rebuilt here."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from coa.tools.code import make_code_tool
from coa.tools.collection import Collection, require_collection
from coa.tools.config import SearchConfig, ToolsConfig
from coa.tools.crawl import make_crawl_tool
from coa.tools.sandbox import SandboxConfig
from coa.tools.search import BlockingSearch, LocalBM25Search, make_web_search_tool, make_wiki_search_tool
from coa.tools.search_providers import build_search_provider, check_search
from coa.tools.toolbox import FunctionToolBox, ObservationStore


def check_tools(config: ToolsConfig, fix: str, collection: Collection | None = None) -> None:
    """Check the endpoint behind each enabled search tool before a stage's first run
    (:func:`~coa.tools.search_providers.check_search`: exit 3 within seconds, with the fix), and that
    a local search has a ``collection`` to serve; ``fix`` is where the stage's tools are configured
    (``collect.tools``). With ``record: replay`` the tools answer from recordings only, and no
    endpoint is called."""
    require_collection(config, collection, fix)
    if config.record == "replay":
        return
    if "web_search" in config.enabled:
        check_search(config.search, fix=f"{fix}.search")
    if "wiki_search" in config.enabled:
        check_search(config.wiki, fix=f"{fix}.wiki")


def build_toolbox(
    config: ToolsConfig,
    storage_root: str | None,
    blocked_hosts: Sequence[str] = (),
    collection: Collection | None = None,
    fix: str = "tools",
) -> FunctionToolBox:
    """The agents' tools, with the observation store under ``storage_root`` unless record=off.

    ``collection``: the documents the local search and the crawler's ``local://`` pages serve (the
    step's ``encyclopedia`` input); a local search without one is refused
    (:func:`~coa.tools.collection.require_collection`, ``fix`` naming the tools' section). Without one
    the crawler fetches remote pages only.

    ``blocked_hosts`` (the evaluation's leak guard): search hits and crawls at these
    ``host/path-prefix`` locations are dropped; the providers' names (the observation store's keys)
    then carry a hash of the list, so an unguarded recording is never replayed.
    """

    require_collection(config, collection, fix)
    functions: dict[str, Any] = {}
    providers: dict[str, str] = {}
    local: LocalBM25Search | None = None

    def local_collection() -> LocalBM25Search:
        nonlocal local
        assert collection is not None  # require_collection saw to it
        if local is None:
            local = LocalBM25Search(collection.documents)
        return local

    def provider_for(search: SearchConfig) -> Any:
        if search.provider == "local_bm25" and search.index_dir is None:
            provider: Any = local_collection()
        else:
            provider = build_search_provider(search)
        return BlockingSearch(provider, blocked_hosts) if blocked_hosts else provider

    corpus = collection.name if collection is not None else "remote"
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
            config=config.crawl,
            local_docs=local_collection() if collection is not None else None,
            blocked=tuple(blocked_hosts),
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
