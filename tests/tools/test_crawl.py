"""crawl_page against a local HTTP server on 127.0.0.1 (started and stopped here): boilerplate is
stripped, errors and timeouts become observations, budgets and the summariser hook apply."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coa.synthetic import build_encyclopedia
from coa.tools.crawl import (
    CrawlConfig,
    clean_url,
    crawl_page,
    crawl_pages,
    extract_text,
    make_crawl_tool,
    parse_urls,
    truncate,
)
from coa.tools.search import LocalBM25Search, local_url

ARTICLE = (
    "Kelo Corp is a shipping company founded by Mira Tola in 1987. Its headquarters are in the city of "
    "Tarvo, on the Dano River, where it keeps a fleet of forty vessels."
)
PAGE = f"""<!doctype html>
<html><head><title>Kelo Corp - Company profile</title>
<script>var tracker = "SCRIPT_MARKER";</script><style>.nav {{ color: red }} STYLE_MARKER</style></head>
<body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About NAV_MARKER</a></li>
<li><a href="/jobs">Jobs</a></li></ul></nav>
<header><div class="banner">Subscribe now HEADER_MARKER</div></header>
<main><article>
<h1>Kelo Corp</h1>
<p>{ARTICLE}</p>
<p>The company employs 6219 people and ships ceramics, glass and paper across the northern sea routes
every season.</p>
</article></main>
<aside>Related links ASIDE_MARKER</aside>
<footer><p>Copyright 2024 FOOTER_MARKER. All rights reserved.</p></footer>
<script>document.write("INLINE_SCRIPT_MARKER")</script>
</body></html>"""
LONG_TEXT = " ".join(f"word{i}" for i in range(5000))


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server API
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._route()

    def _send(self, status: int, body: bytes, content_type: str | None = "text/html; charset=utf-8") -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _route(self) -> None:
        if self.path == "/article":
            self._send(200, PAGE.encode())
        elif self.path == "/plain":
            self._send(200, b"Just plain text.\nSecond line.", "text/plain")
        elif self.path == "/long":
            self._send(200, LONG_TEXT.encode(), "text/plain; charset=utf-8")
        elif self.path == "/image":
            self._send(200, b"\x89PNG\r\n\x1a\n\x00\x00binary", "image/png")
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/article")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/slow":
            time.sleep(2.0)
            self._send(200, b"<html><body><p>too late</p></body></html>")
        elif self.path == "/drip":  # headers at once, then a trickle of body that never ends in time
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(20):
                self.wfile.write(b"x" * 10)
                self.wfile.flush()
                time.sleep(0.1)
        elif self.path == "/error":
            self._send(500, b"<html><body>Internal error</body></html>")
        else:
            self._send(404, b"<html><body><h1>Not Found</h1></body></html>")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(timeout=5)


FAST = CrawlConfig(timeout_s=0.6)


def test_html_boilerplate_is_stripped(site: str) -> None:
    text = crawl_page(f"{site}/article", config=FAST)
    assert text.startswith("Kelo Corp - Company profile\n\n")
    assert ARTICLE in text and "6219 people" in text and "ASIDE_MARKER" not in text
    for marker in (
        "SCRIPT_MARKER",
        "STYLE_MARKER",
        "NAV_MARKER",
        "HEADER_MARKER",
        "FOOTER_MARKER",
        "INLINE_SCRIPT",
    ):
        assert marker not in text, marker
    assert "<p>" not in text and "var tracker" not in text


def test_extract_text_fallback_for_tiny_pages() -> None:
    title, text = extract_text(
        "<html><head><title>T</title><script>x()</script></head><body><nav>menu</nav>Hi.</body></html>"
    )
    assert title == "T" and text == "Hi."
    wrapped = PAGE.replace("<body>", "<body><form action='/post'>").replace("</body>", "</form></body>")
    assert ARTICLE in extract_text(wrapped)[1]  # whole-page <form> wrappers (ASP.NET) keep their content
    assert extract_text("") == ("", "")


def test_http_errors_become_observations(site: str) -> None:
    assert crawl_page(f"{site}/missing", config=FAST) == "[Page content not accessible: HTTP 404 Not Found]"
    assert (
        crawl_page(f"{site}/error", config=FAST)
        == "[Page content not accessible: HTTP 500 Internal Server Error]"
    )
    assert (
        crawl_page(f"{site}/image", config=FAST)
        == "[Page content not accessible: non-text content (image/png)]"
    )


def test_slow_page_times_out_quickly(site: str) -> None:
    start = time.monotonic()
    assert crawl_page(f"{site}/slow", config=FAST) == "[Page content not accessible: timed out after 0.6 s]"
    assert time.monotonic() - start < 1.8


def test_trickling_page_hits_the_total_deadline(site: str) -> None:
    start = time.monotonic()
    assert "timed out after 0.6 s" in crawl_page(f"{site}/drip", config=FAST)
    assert time.monotonic() - start < 1.8


def test_redirects_plain_text_and_refused_connections(site: str) -> None:
    assert ARTICLE in crawl_page(f"{site}/redirect", config=FAST)
    assert crawl_page(f"{site}/plain", config=FAST) == "Just plain text.\nSecond line."
    assert crawl_page("http://127.0.0.1:9/", config=FAST).startswith(
        "[Page content not accessible: connection failed"
    )
    assert (
        crawl_page("ftp://example.org/x", config=FAST)
        == "[Page content not accessible: unsupported url scheme 'ftp']"
    )


def test_budget_truncates_with_a_marker(site: str) -> None:
    text = crawl_page(f"{site}/long", config=CrawlConfig(timeout_s=2, max_chars=500))
    body, marker = text.split("\n\n[... truncated: ")
    assert len(body) <= 500 and body.endswith(body.split()[-1]) and body.split()[-1].startswith("word")
    assert marker == f"showing {len(body)} of {len(LONG_TEXT)} characters ...]"


def test_token_budget_with_a_counter() -> None:
    def words(s: str) -> int:
        return len(s.split())

    cut = truncate(LONG_TEXT, max_chars=10_000, max_tokens=50, count_tokens=words)
    assert words(cut.split("\n\n[...")[0]) <= 50 and "truncated" in cut
    assert truncate("short text", max_chars=100) == "short text"
    assert len(truncate(LONG_TEXT, max_tokens=25).split("\n\n[...")[0]) <= 100  # ~4 chars per token


def test_summariser_hook(site: str) -> None:
    seen: list[tuple[str, str | None]] = []

    def summarise(text: str, query: str | None) -> str:
        seen.append((text, query))
        return f"Summary for {query}: founded by Mira Tola."

    out = crawl_page(f"{site}/article", "who founded Kelo Corp", config=FAST, summarise=summarise)
    assert out == "Summary for who founded Kelo Corp: founded by Mira Tola."
    assert ARTICLE in seen[0][0] and "NAV_MARKER" not in seen[0][0]

    def broken(text: str, query: str | None) -> str:
        raise RuntimeError("llm down")

    out = crawl_page(f"{site}/article", "q", config=FAST, summarise=broken)
    assert out.startswith("[summary unavailable: llm down]") and ARTICLE in out


def test_crawl_pages_renders_the_afm_layout(site: str) -> None:
    out = crawl_pages(f"[Kelo]({site}/article) | {site}/missing", config=FAST)
    first, second = out.split("\n\nPage 2 ")
    assert first.startswith(f"Page 1 [{site}/article] Content:\nKelo Corp - Company profile")
    assert second == f"[{site}/missing]: [Page content not accessible: HTTP 404 Not Found]"
    summarised = crawl_pages(f"{site}/plain", "q", config=FAST, summarise=lambda t, q: "short")
    assert summarised == f"Page 1 [{site}/plain] Summary:\nshort"
    assert crawl_pages("  ", config=FAST) == "[Page content not accessible: no url given]"
    assert make_crawl_tool(config=FAST)(f"{site}/plain").endswith("Just plain text.\nSecond line.")


def test_url_cleanup() -> None:
    assert clean_url(" [title](https://a.example/x) ") == "https://a.example/x"
    assert clean_url("<https://a.example/y>") == "https://a.example/y"
    assert clean_url("www.example.org/page") == "https://www.example.org/page"
    assert parse_urls("https://a.example | [b](https://b.example) |  ") == [
        "https://a.example",
        "https://b.example",
    ]


def test_file_urls_only_inside_the_root(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "page.html"
    page.parent.mkdir()
    page.write_text(PAGE)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    url = page.as_uri()
    assert "file:// urls are disabled" in crawl_page(url)
    allowed = CrawlConfig(file_root=str(page.parent))
    text = crawl_page(url, config=allowed)
    assert ARTICLE in text and "NAV_MARKER" not in text
    assert (
        crawl_page(secret.as_uri(), config=allowed)
        == "[Page content not accessible: file is outside the allowed folder]"
    )
    assert (
        crawl_page((page.parent / "nope.html").as_uri(), config=allowed)
        == "[Page content not accessible: file not found]"
    )
    binary = page.parent / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02")
    assert "non-text content" in crawl_page(binary.as_uri(), config=allowed)


def test_local_documents_from_the_search_collection() -> None:
    index = LocalBM25Search(build_encyclopedia(0, 60))
    doc = index.documents[0]
    assert crawl_page(local_url(doc.id), local_docs=index) == f"{doc.title}\n\n{doc.text}"
    assert crawl_page(local_url(doc.id), local_docs={doc.id: doc}) == f"{doc.title}\n\n{doc.text}"
    assert (
        crawl_page(local_url("ghost"), local_docs=index)
        == "[Page content not accessible: no local document with id 'ghost']"
    )
    assert "no local document collection" in crawl_page(local_url(doc.id))
