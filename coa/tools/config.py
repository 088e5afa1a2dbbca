"""The tools the agents and the student call, from one config: search, crawl, code in the sandbox.

:class:`ToolsConfig` says which tools exist and where their answers come from; :func:`build_toolbox`
builds the :class:`~coa.tools.toolbox.FunctionToolBox` that collection, evaluation and RL call
(with the observation store for record/replay). Config only: :func:`~coa.tools.build.build_toolbox`
builds the tools, so loading a profile loads none of them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from coa.config import StrictModel

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
MOVED_KEYS = ("encyclopedia_seed", "encyclopedia_entities")
"""Keys a tools section no longer has: the local search serves the synthetic step's encyclopedia."""


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
    crawl: CrawlConfig = Field(default_factory=CrawlConfig, description="Crawler settings.")
    code: CodeToolConfig = Field(default_factory=CodeToolConfig, description="Sandbox limits.")
    record: Literal["off", "record", "replay", "auto"] = Field(
        default="auto", description="Observation store: reuse recorded results (auto), only replay, or off."
    )

    @model_validator(mode="before")
    @classmethod
    def _encyclopedia_moved(cls, data: Any) -> Any:
        """A profile that still sets the encyclopedia here is told where it lives now."""
        moved = [k for k in MOVED_KEYS if isinstance(data, dict) and k in data]
        if moved:
            raise ValueError(
                f"{', '.join(moved)}: the tools no longer choose an encyclopedia; the local search serves "
                "the synthetic step's `encyclopedia` table (the one the tasks were drawn from), which the "
                "plan hands to every step whose search is local: set synthetic.encyclopedia_seed and "
                "synthetic.encyclopedia_size instead, and remove these keys"
            )
        return data
