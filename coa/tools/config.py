"""The tools the agents and the student call, from one config: search, crawl, code in the sandbox.

:class:`ToolsConfig` says which tools exist and where their answers come from; :func:`build_toolbox`
builds the :class:`~coa.tools.toolbox.FunctionToolBox` that collection, evaluation and RL call
(with the observation store for record/replay). Config only at load time: the tools themselves
are imported when :func:`build_toolbox` runs, so loading a profile loads no tool.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from coa.config import StrictModel

if TYPE_CHECKING:
    from coa.tools.search import LocalBM25Search
    from coa.tools.toolbox import FunctionToolBox

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class SerperConfig(StrictModel):
    """A Serper-compatible search endpoint (Serper itself, or a caching proxy that speaks its JSON)."""

    url: str = Field(default="https://google.serper.dev/search", description="POST endpoint.")
    api_key_env: str | None = Field(
        default="SERPER_API_KEY",
        pattern=_ENV_NAME,
        description="NAME of the environment variable holding the API key (never the key itself); "
        "null sends no X-API-KEY header (e.g. a local proxy).",
    )
    timeout_s: float = Field(default=30.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(
        default=2, ge=0, description="Retries on 429/5xx, timeouts and connection errors."
    )
    backoff_s: float = Field(default=1.0, ge=0, description="Linear back-off step between retries.")


class RetrieveConfig(StrictModel):
    """An AFM/Search-R1 ``/retrieve`` server (dense or BM25 over Wikipedia)."""

    url: str | None = Field(default=None, description="Full endpoint, e.g. `http://host:8000/retrieve`.")
    url_env: str | None = Field(
        default="WIKI_RAG_SERVER_URL",
        pattern=_ENV_NAME,
        description="NAME of the environment variable holding the endpoint when `url` is unset.",
    )
    timeout_s: float = Field(default=30.0, gt=0, description="Per-request timeout.")
    max_retries: int = Field(default=3, ge=0, description="Retries on 5xx, timeouts and connection errors.")
    backoff_s: float = Field(default=0.5, ge=0, description="Linear back-off step between retries.")


class SearchConfig(StrictModel):
    """Which provider serves a search tool."""

    provider: Literal["local_bm25", "serper", "retrieve"] = Field(
        default="local_bm25", description="local_bm25 (embedded default), serper (web) or retrieve (wiki)."
    )
    index_dir: str | None = Field(
        default=None, description="local_bm25: a saved index folder; unset = build from the given documents."
    )
    top_k: int = Field(default=10, ge=1, description="Results per query.")
    serper: SerperConfig = Field(
        default_factory=SerperConfig, description="The Serper-compatible endpoint (provider: serper)."
    )
    retrieve: RetrieveConfig = Field(
        default_factory=RetrieveConfig, description="The AFM/Search-R1 /retrieve server (provider: retrieve)."
    )


class CrawlConfig(StrictModel):
    """How pages are fetched and cut down."""

    timeout_s: float = Field(default=20.0, gt=0, description="Total time allowed for one page.")
    max_chars: int = Field(default=8000, ge=100, description="Character budget of one page's text.")
    max_tokens: int | None = Field(
        default=None, ge=10, description="Optional token budget (needs a token counter; else ~4 chars/token)."
    )
    max_bytes: int = Field(
        default=5_000_000, ge=1024, description="Stop reading a response after this many bytes."
    )
    summary_input_chars: int = Field(
        default=60_000, ge=1000, description="Most characters of page text handed to the summariser."
    )
    max_redirects: int = Field(default=5, ge=0, description="Redirects followed.")
    user_agent: str = Field(
        default="Mozilla/5.0 (compatible; coa-crawl/1.0)", description="User-Agent header."
    )
    file_root: str | None = Field(
        default=None, description="Folder that file:// urls may read from; unset disables file:// urls."
    )


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
    from coa.tools.code import make_code_tool
    from coa.tools.crawl import make_crawl_tool
    from coa.tools.sandbox import SandboxConfig
    from coa.tools.search import BlockingSearch, LocalBM25Search, make_web_search_tool, make_wiki_search_tool
    from coa.tools.search_providers import build_search_provider
    from coa.tools.toolbox import FunctionToolBox, ObservationStore

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
