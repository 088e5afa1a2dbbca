"""The ``crawl_page`` tool: fetch a page, keep its readable text, fit it to a budget.

:func:`crawl_page` fetches one url and returns an observation string, never raising:

- ``http(s)://`` with httpx (redirects followed, a total deadline, a byte cap); HTML goes through
  ``trafilatura`` (a maintained main-text extractor) so menus, scripts and footers are dropped,
  with a plain lxml fallback for pages too small for it; other text types are kept as they are;
- ``file://`` inside a configured ``file_root`` only (off by default, so an agent cannot read the
  machine's files);
- ``local://doc/<id>`` from a local collection (e.g. :class:`coa.tools.search.LocalBM25Search`
  over the synthetic encyclopedia), the urls that local search returns.

The text is truncated to ``max_chars`` (and optionally ``max_tokens`` with a token counter) with a
visible marker. An optional summariser hook ``summarise(text, query) -> str`` (an LLM later)
replaces the raw text. Errors (HTTP 4xx/5xx, timeouts, non-text content, unknown document) come
back as ``[Page content not accessible: <reason>]``, the AFM crawl server's wording.
:func:`crawl_pages` takes the tool argument (``url1 | url2``, markdown links accepted) and renders
``Page i [url] Content:``/``Summary:`` blocks as the AFM crawl server does (afm-spec §5.2).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from coa.errors import CoaError
from coa.settings import scrub
from coa.tools.config import CrawlConfig as CrawlConfig  # its home: coa.tools.config
from coa.tools.search import blocked_url

log = logging.getLogger(__name__)

Summariser = Callable[[str, str | None], str]
"""``summarise(page_text, query) -> summary``; query is None when the agent gave none."""
TokenCounter = Callable[[str], int]

_HTML_TYPES = ("text/html", "application/xhtml+xml")
_TEXT_TYPES = ("application/json", "application/xml", "application/ld+json", "application/javascript")
_HTML_EXTS = (".html", ".htm", ".xhtml")


class LocalStore(Protocol):
    """A local collection: ``get(doc_id)`` returns a document with ``title`` and ``text``, or None."""

    def get(self, doc_id: str) -> Any: ...


class PageError(CoaError):
    """A page could not be read; the message is the reason shown to the agent."""


@dataclasses.dataclass(frozen=True)
class Page:
    url: str
    title: str
    text: str


# -- extraction and truncation ------------------------------------------------------------------

_BOILERPLATE_XPATH = (
    "//script | //style | //noscript | //template | //svg | //iframe | //nav | //aside | //footer"
    " | //header[not(ancestor::article) and not(ancestor::main)]"
)


def _parse_clean(html: str) -> tuple[str, Any]:
    """``(title, tree)`` with scripts, styles and page chrome (nav, aside, footer, site header) dropped."""
    import lxml.html

    try:
        root = lxml.html.fromstring(html)
    except Exception:  # lxml raises several types on junk or empty input
        return "", None
    title = " ".join((root.findtext(".//title") or "").split())
    for el in root.xpath(_BOILERPLATE_XPATH):
        el.drop_tree()
    return title, root


def _plain_text(root: Any) -> str:
    body = root.find(".//body")
    lines = (" ".join(line.split()) for line in (body if body is not None else root).itertext())
    return "\n".join(line for line in lines if line)


def extract_text(html: str, url: str | None = None) -> tuple[str, str]:
    """``(title, readable text)`` of an HTML page: main content only, boilerplate removed.

    Page chrome is dropped first (lxml), then ``trafilatura`` picks the main text; a page too small
    for trafilatura keeps all its remaining text.
    """
    import lxml.html
    import trafilatura

    title, root = _parse_clean(html)
    if root is None:
        return title, ""
    text = trafilatura.extract(
        lxml.html.tostring(root, encoding="unicode"),
        url=url,
        include_comments=False,
        include_tables=True,
        include_images=False,
        include_links=False,
        favor_recall=True,
        deduplicate=False,
        output_format="txt",
    )
    if not text or not text.strip():
        text = _plain_text(root)
    return title, text.strip()


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= int(limit * 0.8):
        cut = cut[:space]
    return cut.rstrip()


def truncate(
    text: str,
    max_chars: int | None = None,
    max_tokens: int | None = None,
    count_tokens: TokenCounter | None = None,
) -> str:
    """``text`` cut (at a word boundary) to the budgets, with a marker saying how much was kept."""
    limit = len(text) if max_chars is None else max_chars
    if max_tokens is not None and count_tokens is None:
        limit = min(limit, max_tokens * 4)
    kept = _cut(text, limit)
    if max_tokens is not None and count_tokens is not None and count_tokens(kept) > max_tokens:
        lo, hi = 0, len(kept)
        while lo < hi:  # largest prefix within the token budget
            mid = (lo + hi + 1) // 2
            if count_tokens(kept[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        kept = _cut(kept, lo)
    if len(kept) >= len(text):
        return text
    return f"{kept}\n\n[... truncated: showing {len(kept)} of {len(text)} characters ...]"


# -- fetching ----------------------------------------------------------------------------------


def _mime(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def _decode(body: bytes, charset: str | None) -> str:
    for enc in (charset, "utf-8"):
        if enc:
            try:
                return body.decode(enc)
            except (LookupError, UnicodeDecodeError):
                continue
    return body.decode("utf-8", errors="replace")


def _looks_binary(body: bytes) -> bool:
    return b"\x00" in body[:4096]


def _to_page(url: str, body_text: str, is_html: bool) -> Page:
    if is_html:
        title, text = extract_text(body_text, url)
    else:
        title, text = "", body_text.strip()
    if not text:
        raise PageError("the page has no readable text")
    return Page(url, title, text)


def _fetch_http(url: str, config: CrawlConfig) -> Page:
    deadline = time.monotonic() + config.timeout_s
    try:
        with (
            httpx.Client(
                timeout=httpx.Timeout(config.timeout_s),
                follow_redirects=True,
                max_redirects=config.max_redirects,
                headers={"User-Agent": config.user_agent, "Accept": "text/html,text/plain;q=0.9,*/*;q=0.5"},
            ) as client,
            client.stream("GET", url) as resp,
        ):
            if resp.status_code >= 400:
                raise PageError(f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip())
            mime = _mime(resp.headers.get("content-type", ""))
            if mime and not (mime.startswith("text/") or mime in _HTML_TYPES or mime in _TEXT_TYPES):
                raise PageError(f"non-text content ({mime})")
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.iter_bytes():
                if time.monotonic() > deadline:
                    raise PageError(f"timed out after {config.timeout_s:g} s")
                chunks.append(chunk)
                size += len(chunk)
                if size >= config.max_bytes:
                    break
            body = b"".join(chunks)[: config.max_bytes]
            charset = resp.charset_encoding
    except httpx.TimeoutException:
        raise PageError(f"timed out after {config.timeout_s:g} s") from None
    except httpx.TooManyRedirects:
        raise PageError(f"more than {config.max_redirects} redirects") from None
    except (httpx.UnsupportedProtocol, httpx.InvalidURL):
        raise PageError("invalid or unsupported URL") from None
    except httpx.TransportError as e:
        raise PageError(f"connection failed ({type(e).__name__})") from None
    if not mime and _looks_binary(body):
        raise PageError("non-text content (binary data)")
    text = _decode(body, charset)
    is_html = mime in _HTML_TYPES or (not mime and text.lstrip()[:1] == "<")
    return _to_page(url, text, is_html)


def _fetch_file(url: str, config: CrawlConfig) -> Page:
    if config.file_root is None:
        raise PageError("file:// urls are disabled (no crawl file_root configured)")
    parsed = urllib.parse.urlparse(url)
    if parsed.netloc not in ("", "localhost"):
        raise PageError(f"file:// url with a remote host ({parsed.netloc})")
    path = Path(urllib.request.url2pathname(parsed.path)).resolve()
    root = Path(config.file_root).resolve()
    if not path.is_relative_to(root):
        raise PageError("file is outside the allowed folder")
    if not path.is_file():
        raise PageError("file not found")
    with path.open("rb") as fh:
        body = fh.read(config.max_bytes)
    if _looks_binary(body):
        raise PageError("non-text content (binary file)")
    text = _decode(body, None)
    return _to_page(url, text, path.suffix.lower() in _HTML_EXTS or text.lstrip()[:1] == "<")


def _fetch_local(url: str, local_docs: LocalStore | Mapping[str, Any] | None) -> Page:
    from coa.tools.search import local_doc_id

    doc_id = local_doc_id(url)
    if doc_id is None:
        raise PageError("malformed local url (expected local://doc/<id>)")
    if local_docs is None:
        raise PageError("no local document collection is configured")
    doc = local_docs.get(doc_id)
    if doc is None:
        raise PageError(f"no local document with id {doc_id!r}")
    return Page(url, str(doc.title), str(doc.text))


def fetch_page(
    url: str, config: CrawlConfig | None = None, local_docs: LocalStore | Mapping[str, Any] | None = None
) -> Page:
    """Fetch ``url`` and extract its readable text; raises :class:`PageError` with a reason."""
    config = config or CrawlConfig()
    scheme = urllib.parse.urlparse(url).scheme.lower()
    if scheme in ("http", "https"):
        return _fetch_http(url, config)
    if scheme == "file":
        return _fetch_file(url, config)
    if scheme == "local":
        return _fetch_local(url, local_docs)
    raise PageError(f"unsupported url scheme {scheme!r}" if scheme else "not a url")


# -- the tool --------------------------------------------------------------------------------


def not_accessible(reason: str) -> str:
    return f"[Page content not accessible: {reason}]"


def _page_text(page: Page) -> str:
    first_line = page.text.split("\n", 1)[0].strip()
    return f"{page.title}\n\n{page.text}" if page.title and first_line != page.title else page.text


def _render(
    page: Page,
    query: str | None,
    config: CrawlConfig,
    summarise: Summariser | None,
    count_tokens: TokenCounter | None,
) -> tuple[str, bool]:
    """The page's observation text and whether it is a summary."""
    text = _page_text(page)
    if summarise is not None:
        try:
            summary = summarise(text[: config.summary_input_chars], query)
            return truncate(summary.strip(), config.max_chars, config.max_tokens, count_tokens), True
        except Exception as e:  # fall back to the raw text, and say so
            log.warning("crawl summariser failed on %s: %s", page.url, type(e).__name__)
            note = f"[summary unavailable: {scrub(str(e))[:200]}]\n\n"
            return note + truncate(text, config.max_chars, config.max_tokens, count_tokens), False
    return truncate(text, config.max_chars, config.max_tokens, count_tokens), False


def crawl_page(
    url: str,
    query: str | None = None,
    *,
    config: CrawlConfig | None = None,
    summarise: Summariser | None = None,
    local_docs: LocalStore | Mapping[str, Any] | None = None,
    count_tokens: TokenCounter | None = None,
) -> str:
    """The readable text (or summary) of ``url`` within the budget, or a clear error; never raises."""
    config = config or CrawlConfig()
    try:
        page = fetch_page(clean_url(url), config, local_docs)
    except PageError as e:
        return not_accessible(str(e))
    except Exception as e:  # a bug in an extractor must not kill the agent loop
        log.warning("crawl of %s failed unexpectedly: %s", url, type(e).__name__)
        return not_accessible(scrub(f"{type(e).__name__}: {e}")[:300])
    return _render(page, query, config, summarise, count_tokens)[0]


_MD_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?\s*\)")
_DOMAIN = re.compile(r"^[\w-]+(\.[\w-]+)+(/\S*)?$")


def clean_url(raw: str) -> str:
    """One url from agent text: markdown ``[t](url)`` unwrapped, quotes/brackets stripped, bare
    domains given ``https://``."""
    s = raw.strip()
    m = _MD_LINK.search(s)
    if m:
        s = m.group(1)
    s = s.strip().strip("<>\"'`").strip()
    if "://" not in s and _DOMAIN.match(s):
        s = "https://" + s
    return s


def parse_urls(argument: str) -> list[str]:
    """The urls of a ``crawl_page`` tool argument: ``url1 | url2`` (markdown links accepted)."""
    return [u for u in (clean_url(part) for part in argument.split("|")) if u]


def crawl_pages(
    argument: str,
    query: str | None = None,
    *,
    config: CrawlConfig | None = None,
    summarise: Summariser | None = None,
    local_docs: LocalStore | Mapping[str, Any] | None = None,
    count_tokens: TokenCounter | None = None,
    blocked: Sequence[str] = (),
) -> str:
    """The ``crawl_page`` observation for a tool argument (AFM §5.2 layout); never raises.

    Urls at a ``blocked`` location (:func:`coa.tools.search.blocked_url`, the evaluation's leak
    guard) are not fetched.
    """
    config = config or CrawlConfig()
    urls = parse_urls(argument)
    if not urls:
        return not_accessible("no url given")
    blocks = []
    for i, url in enumerate(urls, start=1):
        if blocked_url(url, blocked):
            blocks.append(f"Page {i} [{url}]: {not_accessible('blocked during evaluation (benchmark host)')}")
            continue
        try:
            page = fetch_page(url, config, local_docs)
        except PageError as e:
            blocks.append(f"Page {i} [{url}]: {not_accessible(str(e))}")
            continue
        except Exception as e:
            blocks.append(f"Page {i} [{url}]: {not_accessible(scrub(f'{type(e).__name__}: {e}')[:300])}")
            continue
        text, summarised = _render(page, query, config, summarise, count_tokens)
        blocks.append(f"Page {i} [{url}] {'Summary' if summarised else 'Content'}:\n{text}")
    return "\n\n".join(blocks)


def make_crawl_tool(
    *,
    config: CrawlConfig | None = None,
    summarise: Summariser | None = None,
    local_docs: LocalStore | Mapping[str, Any] | None = None,
    count_tokens: TokenCounter | None = None,
    blocked: Sequence[str] = (),
) -> Callable[[str], str]:
    """A ``str -> str`` tool function (argument ``url1 | url2``) for a tool box."""
    return lambda argument: crawl_pages(
        argument,
        config=config,
        summarise=summarise,
        local_docs=local_docs,
        count_tokens=count_tokens,
        blocked=blocked,
    )
