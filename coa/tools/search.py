"""Search providers for the ``web_search`` and ``wiki_search`` tools, and their observation text.

One interface, :class:`SearchProvider` (``search(query, top_k) -> list[SearchHit]``), three
providers:

- :class:`LocalBM25Search`: BM25 (``bm25s``) over a local document collection, e.g. the synthetic
  encyclopedia (:func:`coa.synthetic.build_encyclopedia`). The embedded default: offline and
  deterministic (ties broken by collection order); the index saves to and loads from a folder.
  Hit urls are ``local://doc/<id>``, which :mod:`coa.tools.crawl` can open.
- :class:`SerperSearch`: a Serper-compatible web search API (``POST {"q", "num"}`` with the key in
  the ``X-API-KEY`` header). The config names the *environment variable* holding the key; the key
  is never logged nor put in an error message.
- :class:`RetrieveServerSearch`: an AFM/Search-R1 style ``/retrieve`` server for ``wiki_search``
  (``POST {"queries": [q], "topk": k, "return_scores": true}`` →
  ``{"result": [[{"document": {"id", "contents"}, "score"}]]}``; ``contents`` is title line + text).

The observations follow the AFM tools (afm-spec §5.1, §5.3): :func:`format_web_results` gives
``Found N results:\\n\\n## Web Results\\n1. [title](url)\\n…`` and :func:`format_wiki_results`
``Doc 1 (Title: …)\\n…``. :func:`web_search` / :func:`wiki_search` never raise: a provider error
becomes the observation (``{"error": …}`` JSON for web, ``Search error: …`` for wiki).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx
from pydantic import Field

from coa.config import StrictModel
from coa.errors import InfraError
from coa.settings import scrub

log = logging.getLogger(__name__)

LOCAL_SCHEME = "local"
LOCAL_URL_PREFIX = "local://doc/"
INDEX_FORMAT = "coa-local-bm25"
INDEX_VERSION = 1
_VIDEO_NOISE = "Your browser can't play this video."


class SearchError(InfraError, RuntimeError):
    """A provider could not answer (HTTP error, bad response, missing key, …)."""


@dataclasses.dataclass(frozen=True)
class SearchHit:
    """One search result. ``content`` is the full text where the provider has it (wiki style)."""

    title: str
    url: str
    snippet: str
    date: str | None = None
    source: str | None = None
    content: str | None = None
    score: float | None = None


class SearchProvider(Protocol):
    """Anything that answers a query with ranked hits."""

    name: str

    def search(self, query: str, top_k: int = 10) -> list[SearchHit]: ...


class DocumentLike(Protocol):
    """What a local collection is made of (e.g. :class:`coa.synthetic.Document`)."""

    @property
    def id(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def text(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class LocalDocument:
    """A document of a :class:`LocalBM25Search` collection."""

    id: str
    title: str
    text: str


# -- observation text ------------------------------------------------------------------------


def format_web_results(query: str, hits: Sequence[SearchHit]) -> str:
    """The ``web_search`` observation (AFM ``_format_results_to_string``)."""
    if not hits:
        return f"No results found for query: '{query}'. Use a less specific query."
    entries = []
    for i, hit in enumerate(hits, start=1):
        entry = f"{i}. [{hit.title}]({hit.url})"
        if hit.date:
            entry += f"\nDate published: {hit.date}"
        if hit.source:
            entry += f"\nSource: {hit.source}"
        entry += f"\n{hit.url}\n{hit.snippet.replace(_VIDEO_NOISE, '')}"
        entries.append(entry.strip())
    return f"Found {len(hits)} results:\n\n## Web Results\n" + "\n\n".join(entries)


def format_wiki_results(hits: Sequence[SearchHit]) -> str:
    """The ``wiki_search`` observation (Search-R1 style): ``Doc k (Title: t)\\ntext`` per hit."""
    if not hits:
        return "No search results found."
    parts = [f"Doc {k} (Title: {hit.title})\n{hit.content or hit.snippet}" for k, hit in enumerate(hits, 1)]
    return "\n\n".join(parts).strip()


def blocked_url(url: str, blocked: Sequence[str]) -> bool:
    """Whether ``url`` is at one of the ``host/path-prefix`` locations in ``blocked`` (the leak guard).

    Case-insensitive; a leading ``www.`` is ignored and a host matches its subdomains
    (``huggingface.co/datasets`` blocks ``https://www.huggingface.co/datasets/x``).
    """
    if not blocked:
        return False
    parsed = urllib.parse.urlsplit(url.strip() if "://" in url else f"https://{url.strip()}")
    host = (parsed.hostname or "").lower().removeprefix("www.")
    path = parsed.path.lower().rstrip("/")
    for entry in blocked:
        b_host, _, b_path = entry.lower().removeprefix("www.").partition("/")
        if not (host == b_host or host.endswith("." + b_host)):
            continue
        b_path = "/" + b_path.rstrip("/") if b_path else ""
        if not b_path or path == b_path or path.startswith(b_path + "/"):
            return True
    return False


class BlockingSearch:
    """A provider whose hits at blocked locations are dropped (counted in ``blocked``)."""

    def __init__(self, provider: SearchProvider, blocked: Sequence[str]) -> None:
        self.provider = provider
        self.hosts = tuple(blocked)
        self.blocked = 0

    def search(self, query: str, top_k: int = 10) -> list[SearchHit]:
        hits = self.provider.search(query, top_k)
        kept = [h for h in hits if not blocked_url(h.url, self.hosts)]
        self.blocked += len(hits) - len(kept)
        return kept


def web_search(provider: SearchProvider, query: str, top_k: int = 10) -> str:
    """Run ``query`` and format the result as a ``web_search`` observation; never raises."""
    try:
        hits = provider.search(query.strip(), top_k)
    except Exception as e:  # the observation reports it; the agent can react
        return json.dumps({"error": scrub(f"{type(e).__name__}: {e}")})
    return format_web_results(query.strip(), hits)


def wiki_search(provider: SearchProvider, query: str, top_k: int = 3) -> str:
    """Run ``query`` and format the result as a ``wiki_search`` observation; never raises."""
    try:
        hits = provider.search(query.strip(), top_k)
    except Exception as e:
        return scrub(f"Search error: {e}")
    return format_wiki_results(hits)


def make_web_search_tool(provider: SearchProvider, top_k: int = 10) -> Callable[[str], str]:
    """A ``str -> str`` tool function for a tool box."""
    return lambda query: web_search(provider, query, top_k)


def make_wiki_search_tool(provider: SearchProvider, top_k: int = 3) -> Callable[[str], str]:
    """A ``str -> str`` tool function for a tool box."""
    return lambda query: wiki_search(provider, query, top_k)


# -- local BM25 --------------------------------------------------------------------------------

_STOPWORDS_TEXT = (
    "a an the of in on at to for from by with and or but is are was were be been being do does did "
    "who whom whose which what where when why how that this these those it its as into than then there "
    "their they he she his her him i you we our your not no yes can could would should will shall may "
    "might must has have had about after before also any all some such other"
)
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
_WORD = re.compile(r"\w+")


def _stem(word: str) -> str:
    """A tiny deterministic suffix stripper (founder/founded → found, rivers → riv)."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    changed = True
    while changed and len(word) > 4:
        changed = False
        for suffix in ("ing", "ed", "er"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                changed = True
                break
    return word


def tokenize(text: str) -> list[str]:
    """Lowercase word tokens, stopwords removed, lightly stemmed (the same for docs and queries)."""
    return [_stem(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def focused_snippet(text: str, query_tokens: Iterable[str], max_chars: int = 300) -> str:
    """The sentences of ``text`` that share most words with the query, in text order."""
    sentences = [s for s in _SENTENCE.split(text.strip()) if s]
    if not sentences:
        return ""
    wanted = set(query_tokens)
    ranked = sorted(range(len(sentences)), key=lambda i: (-len(wanted & set(tokenize(sentences[i]))), i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        cost = len(sentences[i]) + (1 if chosen else 0)
        if chosen and used + cost > max_chars:
            continue
        chosen.append(i)
        used += cost
    snippet = " ".join(sentences[i] for i in sorted(chosen))
    return snippet if len(snippet) <= max_chars else snippet[: max_chars - 1].rstrip() + "…"


def local_url(doc_id: str) -> str:
    """The url of a local document: ``local://doc/<id>`` (id percent-encoded)."""
    return LOCAL_URL_PREFIX + urllib.parse.quote(doc_id, safe="")


def local_doc_id(url: str) -> str | None:
    """The document id of a ``local://doc/<id>`` url, else None."""
    if not url.startswith(LOCAL_URL_PREFIX):
        return None
    return urllib.parse.unquote(url[len(LOCAL_URL_PREFIX) :])


class LocalBM25Search:
    """BM25 over a local collection (``bm25s``), deterministic, saved to / loaded from a folder."""

    name = "local_bm25"

    def __init__(
        self,
        documents: Iterable[DocumentLike],
        *,
        k1: float = 1.2,
        b: float = 0.75,
        snippet_chars: int = 300,
        _index: Any = None,
    ) -> None:
        import bm25s

        self.documents: tuple[LocalDocument, ...] = tuple(
            LocalDocument(str(d.id), str(d.title), str(d.text)) for d in documents
        )
        ids = [d.id for d in self.documents]
        if len(set(ids)) != len(ids):
            raise ValueError("document ids must be unique")
        self._by_id = {d.id: i for i, d in enumerate(self.documents)}
        self.k1 = k1
        self.b = b
        self.snippet_chars = snippet_chars
        if _index is not None:
            self._bm25 = _index
        else:
            self._bm25 = bm25s.BM25(k1=k1, b=b)
            if self.documents:
                corpus = [tokenize(f"{d.title}\n{d.text}") or ["\x00"] for d in self.documents]
                self._bm25.index(corpus, show_progress=False)

    def __len__(self) -> int:
        return len(self.documents)

    def get(self, doc_id: str) -> LocalDocument | None:
        """The document with ``doc_id``, or None."""
        i = self._by_id.get(doc_id)
        return None if i is None else self.documents[i]

    def search(self, query: str, top_k: int = 10) -> list[SearchHit]:
        import numpy as np

        if not self.documents or top_k <= 0:
            return []
        tokens = [t for t in tokenize(query) if t in self._bm25.vocab_dict]
        if not tokens:
            return []
        scores = np.asarray(self._bm25.get_scores(tokens), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")[:top_k]
        hits = []
        for i in order:
            if scores[i] <= 0:
                break
            doc = self.documents[int(i)]
            hits.append(
                SearchHit(
                    title=doc.title,
                    url=local_url(doc.id),
                    snippet=focused_snippet(doc.text, tokens, self.snippet_chars),
                    content=doc.text,
                    score=round(float(scores[i]), 6),
                )
            )
        return hits

    # -- persistence --------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write the index, the documents and a small manifest to ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        if self.documents:
            self._bm25.save(str(folder), show_progress=False)
        with (folder / "documents.jsonl").open("w", encoding="utf-8") as fh:
            for d in self.documents:
                fh.write(json.dumps(dataclasses.asdict(d), ensure_ascii=False) + "\n")
        manifest = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "k1": self.k1,
            "b": self.b,
            "snippet_chars": self.snippet_chars,
            "documents": len(self.documents),
        }
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> LocalBM25Search:
        """Load an index written by :meth:`save`."""
        import bm25s

        folder = Path(folder)
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no local search index in {folder} (manifest.json missing)") from None
        if manifest.get("format") != INDEX_FORMAT or manifest.get("version") != INDEX_VERSION:
            raise ValueError(
                f"{folder}: unsupported index format {manifest.get('format')!r} v{manifest.get('version')}"
            )
        with (folder / "documents.jsonl").open(encoding="utf-8") as fh:
            docs = [LocalDocument(**json.loads(line)) for line in fh if line.strip()]
        if len(docs) != manifest["documents"]:
            raise ValueError(f"{folder}: manifest says {manifest['documents']} documents, found {len(docs)}")
        index = bm25s.BM25.load(str(folder), mmap=False, show_progress=False) if docs else None
        return cls(
            docs,
            k1=manifest["k1"],
            b=manifest["b"],
            snippet_chars=manifest["snippet_chars"],
            _index=index,
        )


# -- HTTP providers ----------------------------------------------------------------------------

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


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


# -- config ------------------------------------------------------------------------------------


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


def encyclopedia_search(seed: int = 0, n_entities: int | None = None) -> LocalBM25Search:
    """The embedded default: BM25 over the synthetic encyclopedia ``(seed, n_entities)``."""
    from coa.synthetic import multihop

    return LocalBM25Search(multihop.build_encyclopedia(seed, n_entities or multihop.DEFAULT_ENTITIES))
