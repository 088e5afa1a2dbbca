"""Search providers for the ``web_search`` and ``wiki_search`` tools, and their observation text.

One interface, :class:`SearchProvider` (``search(query, top_k) -> list[SearchHit]``), three
providers:

- :class:`LocalBM25Search`: BM25 (``bm25s``) over a local document collection, e.g. the synthetic
  step's ``encyclopedia`` table (:mod:`coa.tools.collection`). The embedded default: offline and
  deterministic (ties broken by collection order); the index saves to and loads from a folder.
  Hit urls are ``local://doc/<id>``, which :mod:`coa.tools.crawl` can open.
- :class:`~coa.tools.search_providers.SerperSearch` (a Serper-compatible web search API) and
  :class:`~coa.tools.search_providers.RetrieveServerSearch` (an AFM/Search-R1 ``/retrieve`` server for
  ``wiki_search``), over HTTP, in :mod:`coa.tools.search_providers` with the config that picks a
  provider (``SearchConfig``, ``build_search_provider``).

The observations follow the AFM tools (afm-spec §5.1, §5.3): :func:`format_web_results` gives
``Found N results:\\n\\n## Web Results\\n1. [title](url)\\n…`` and :func:`format_wiki_results`
``Doc 1 (Title: …)\\n…``. :func:`web_search` / :func:`wiki_search` never raise: a provider error
becomes the observation (``{"error": …}`` JSON for web, ``Search error: …`` for wiki).
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from coa.errors import InfraError
from coa.settings import scrub

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
    """What a local collection is made of (e.g. :class:`LocalDocument`)."""

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
