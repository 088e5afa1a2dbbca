"""The providers behind the search tools: Serper and ``/retrieve`` over HTTP, and which one serves a tool.

- :class:`SerperSearch`: a Serper-compatible web search API (``POST {"q", "num"}`` with the key in
  the ``X-API-KEY`` header). The config names the *environment variable* holding the key; the key
  is never logged nor put in an error message.
- :class:`RetrieveServerSearch`: an AFM/Search-R1 style ``/retrieve`` server for ``wiki_search``
  (``POST {"queries": [q], "topk": k, "return_scores": true}`` →
  ``{"result": [[{"document": {"id", "contents"}, "score"}]]}``; ``contents`` is title line + text).
- :class:`SearchConfig` / :func:`build_search_provider`: the provider a tool's config names (the
  embedded default, :class:`~coa.tools.search.LocalBM25Search`, lives beside the interface in
  :mod:`coa.tools.search`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import Any

import httpx

from coa.tools.config import RetrieveConfig, SearchConfig, SerperConfig  # their home: coa.tools.config
from coa.tools.search import DocumentLike, LocalBM25Search, SearchError, SearchHit, SearchProvider

log = logging.getLogger(__name__)

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


def _post_json(
    url: str,
    payload: dict[str, Any],
    *,
    headers: dict[str, str],
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
    what: str,
) -> Any:
    """POST JSON with bounded linear-back-off retries; errors never include the request headers."""
    last = ""
    for attempt in range(max_retries + 1):
        if attempt:
            time.sleep(backoff_s * attempt)
        try:
            with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
                resp = client.post(url, json=payload, headers=headers)
        except httpx.TimeoutException:
            last = f"{what}: timed out after {timeout_s:g} s"
        except httpx.TransportError as e:
            last = f"{what}: connection error ({type(e).__name__})"
        else:
            if resp.status_code == 200:
                try:
                    return resp.json()
                except ValueError:
                    raise SearchError(f"{what}: response is not JSON") from None
            last = f"{what}: HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
            if resp.status_code not in _RETRY_STATUS:
                raise SearchError(last)
        log.warning("%s (attempt %d of %d)", last, attempt + 1, max_retries + 1)
    raise SearchError(last)


class SerperSearch:
    """Web search through a Serper-compatible API."""

    name = "serper"

    def __init__(self, config: SerperConfig | None = None) -> None:
        self.config = config or SerperConfig()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        env = self.config.api_key_env
        if env is not None:
            key = os.environ.get(env)
            if not key:
                raise SearchError(f"serper: environment variable {env} (the API key) is not set")
            headers["X-API-KEY"] = key
        return headers

    def search(self, query: str, top_k: int = 10) -> list[SearchHit]:
        cfg = self.config
        data = _post_json(
            cfg.url,
            {"q": query, "num": top_k},
            headers=self._headers(),
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            backoff_s=cfg.backoff_s,
            what="serper",
        )
        if not isinstance(data, dict):
            raise SearchError("serper: unexpected response (not a JSON object)")
        organic = data.get("organic") or []
        if not isinstance(organic, list):
            raise SearchError("serper: unexpected response ('organic' is not a list)")
        hits = []
        for item in organic[:top_k]:
            if not isinstance(item, dict):
                continue
            hits.append(
                SearchHit(
                    title=str(item.get("title", "")),
                    url=str(item.get("link", "")),
                    snippet=str(item.get("snippet", "")),
                    date=str(item["date"]) if item.get("date") else None,
                    source=str(item["source"]) if item.get("source") else None,
                )
            )
        return hits


class RetrieveServerSearch:
    """``wiki_search`` through an AFM/Search-R1 ``/retrieve`` server."""

    name = "retrieve"

    def __init__(self, config: RetrieveConfig | None = None) -> None:
        self.config = config or RetrieveConfig()

    def endpoint(self) -> str:
        cfg = self.config
        url = cfg.url or (os.environ.get(cfg.url_env) if cfg.url_env else None)
        if not url:
            raise SearchError(f"retrieve: no endpoint (set `url` or the environment variable {cfg.url_env})")
        return url

    def search(self, query: str, top_k: int = 3) -> list[SearchHit]:
        cfg = self.config
        data = _post_json(
            self.endpoint(),
            {"queries": [query], "topk": top_k, "return_scores": True},
            headers={"Content-Type": "application/json"},
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            backoff_s=cfg.backoff_s,
            what="retrieve",
        )
        try:
            results = data["result"][0]
        except (KeyError, IndexError, TypeError):
            raise SearchError("retrieve: unexpected response (no result list)") from None
        hits = []
        for item in results[:top_k]:
            doc = item.get("document", item) if isinstance(item, dict) else None
            if not isinstance(doc, dict):
                continue
            contents = str(doc.get("contents", ""))
            title, _, text = contents.partition("\n")
            doc_id = doc.get("id")
            score = item.get("score") if "document" in item else None
            hits.append(
                SearchHit(
                    title=title,
                    url=f"wiki://{doc_id}" if doc_id is not None else "",
                    snippet=text,
                    content=text,
                    score=float(score) if isinstance(score, int | float) else None,
                )
            )
        return hits


def build_search_provider(
    config: SearchConfig, documents: Iterable[DocumentLike] | None = None
) -> SearchProvider:
    """The provider ``config`` names; ``local_bm25`` loads ``index_dir`` or indexes ``documents``."""
    if config.provider == "serper":
        return SerperSearch(config.serper)
    if config.provider == "retrieve":
        return RetrieveServerSearch(config.retrieve)
    if config.index_dir is not None:
        return LocalBM25Search.load(config.index_dir)
    if documents is None:
        raise ValueError("local_bm25 needs documents or an index_dir")
    return LocalBM25Search(documents)


def check_search(config: SearchConfig, *, fix: str, timeout_s: float = 5.0) -> None:
    """One query to the endpoint behind a search tool before a stage's first run (no retries, at most
    ``timeout_s``): unreachable, refusing, without its key or not answering the provider's JSON raises
    :class:`~coa.llm.preflight.EndpointUnusable` (exit 3) naming the endpoint and the setting to fix
    (``fix``: e.g. ``collect.tools.search``). ``local_bm25`` needs no check. The query counts as one
    search with the provider (one Serper credit)."""
    from coa.llm.preflight import EndpointUnusable

    provider: SerperSearch | RetrieveServerSearch
    if config.provider == "local_bm25":
        return
    if config.provider == "serper":
        serper = config.serper
        quick = {"max_retries": 0, "timeout_s": min(serper.timeout_s, timeout_s)}
        provider = SerperSearch(serper.model_copy(update=quick))
        where, setting = f"serper search endpoint ({serper.url})", f"{fix}.serper (url, api_key_env)"
    else:
        retrieve = config.retrieve
        quick = {"max_retries": 0, "timeout_s": min(retrieve.timeout_s, timeout_s)}
        provider = RetrieveServerSearch(retrieve.model_copy(update=quick))
        url = retrieve.url or (f"${retrieve.url_env}" if retrieve.url_env else "no url")
        where, setting = f"retrieve search endpoint ({url})", f"{fix}.retrieve (url, url_env)"
    try:
        provider.search("preflight check", top_k=1)
    except SearchError as e:
        raise EndpointUnusable(
            f"{where} failed its check before the first run: {e}; start the server or fix {setting}, "
            "then rerun the same command"
        ) from None
