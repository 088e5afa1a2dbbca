"""Search providers: local BM25 over the synthetic encyclopedia, and the two HTTP providers
against fake servers on 127.0.0.1 (started and stopped here, every call bounded by a timeout)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coa.synthetic import build_encyclopedia, generate, hop_query
from coa.tools.search import (
    LocalBM25Search,
    LocalDocument,
    SearchError,
    SearchHit,
    format_web_results,
    format_wiki_results,
    local_doc_id,
    local_url,
    tokenize,
    web_search,
    wiki_search,
)
from coa.tools.search_providers import (
    RetrieveConfig,
    RetrieveServerSearch,
    SearchConfig,
    SerperConfig,
    SerperSearch,
    build_search_provider,
)

ENTITIES = 300


@pytest.fixture(scope="module")
def encyclopedia_index() -> LocalBM25Search:
    return LocalBM25Search(build_encyclopedia(0, ENTITIES))


# -- local BM25 ----------------------------------------------------------------------------------


def hop_hit_rate(index: LocalBM25Search, n_train: int = 300, n_heldout: int = 100) -> tuple[int, int]:
    """Top-1 hits over every hop of generated multi-hop tasks, with both single-hop phrasings."""
    hits = total = 0
    for split, n in (("train", n_train), ("heldout", n_heldout)):
        table = generate("multihop", n, seed=0, split=split, encyclopedia_size=ENTITIES)
        for meta in table.column("metadata").to_pylist():
            for hop in json.loads(meta)["path"]:
                for variant in (0, 1):
                    top = index.search(hop_query(hop["relation"], hop["subject"], variant), 1)
                    hits += bool(top) and local_doc_id(top[0].url) == hop["doc_id"]
                    total += 1
    return hits, total


def test_bm25_finds_the_gold_document_of_each_hop(encyclopedia_index: LocalBM25Search) -> None:
    hits, total = hop_hit_rate(encyclopedia_index)
    rate = hits / total
    print(f"BM25 top-1 hop hit rate: {hits}/{total} = {rate:.4f}")
    assert total > 1000
    assert rate >= 0.9


def test_bm25_hits_carry_url_snippet_and_full_text(encyclopedia_index: LocalBM25Search) -> None:
    doc = next(d for d in encyclopedia_index.documents if d.id.startswith("company-"))
    name = doc.title
    hits = encyclopedia_index.search(f"Who founded {name}?", 3)
    assert hits[0].title == name and hits[0].url == local_url(doc.id) and hits[0].content == doc.text
    assert "founded" in hits[0].snippet and len(hits[0].snippet) <= 300
    assert hits[0].score is not None and hits[0].score >= (hits[1].score or 0)
    assert encyclopedia_index.get(doc.id) == doc and encyclopedia_index.get("nope") is None


def test_bm25_is_deterministic_and_breaks_ties_by_collection_order() -> None:
    docs = [LocalDocument(f"d{i}", "Same title", "identical words here") for i in range(5)]
    docs.append(LocalDocument("other", "Other", "unrelated text"))
    index = LocalBM25Search(docs)
    assert [h.url for h in index.search("identical words", 3)] == [local_url(f"d{i}") for i in range(3)]
    again = LocalBM25Search(docs)
    assert index.search("identical words", 6) == again.search("identical words", 6)


def test_bm25_save_and_load_round_trip(encyclopedia_index: LocalBM25Search, tmp_path: Path) -> None:
    folder = encyclopedia_index.save(tmp_path / "index")
    loaded = LocalBM25Search.load(folder)
    assert loaded.documents == encyclopedia_index.documents
    for query in ("Who founded Kobo Works?", "river flows city", "festival summit"):
        assert loaded.search(query, 5) == encyclopedia_index.search(query, 5)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(ValueError, match="unsupported index format"):
        LocalBM25Search.load(folder)
    with pytest.raises(FileNotFoundError):
        LocalBM25Search.load(tmp_path / "missing")


def test_queries_without_known_words_find_nothing(encyclopedia_index: LocalBM25Search) -> None:
    assert encyclopedia_index.search("the of which", 5) == []
    assert encyclopedia_index.search("Xyzzyq", 5) == []
    assert (
        web_search(encyclopedia_index, "Xyzzyq")
        == "No results found for query: 'Xyzzyq'. Use a less specific query."
    )
    assert wiki_search(encyclopedia_index, "Xyzzyq") == "No search results found."
    assert LocalBM25Search([]).search("anything") == []


def test_tokenizer_stems_relation_words_alike() -> None:
    assert tokenize("Who founded it?") == tokenize("the founder") == ["found"]
    assert tokenize("headquarters") == tokenize("headquartered")
    assert tokenize("Kalo Mira") == ["kalo", "mira"]


def test_duplicate_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="unique"):
        LocalBM25Search([LocalDocument("a", "t", "x"), LocalDocument("a", "u", "y")])


def test_build_search_provider(tmp_path: Path) -> None:
    docs = [LocalDocument("a", "Alpha", "alpha text"), LocalDocument("b", "Beta", "beta text")]
    local = build_search_provider(SearchConfig(), docs)
    assert isinstance(local, LocalBM25Search) and local.search("beta")[0].title == "Beta"
    assert isinstance(local, LocalBM25Search)
    local.save(tmp_path / "ix")
    loaded = build_search_provider(SearchConfig(index_dir=str(tmp_path / "ix")))
    assert isinstance(loaded, LocalBM25Search) and len(loaded) == 2
    assert isinstance(build_search_provider(SearchConfig(provider="serper")), SerperSearch)
    assert isinstance(build_search_provider(SearchConfig(provider="retrieve")), RetrieveServerSearch)
    with pytest.raises(ValueError):
        build_search_provider(SearchConfig())


# -- observation formats ----------------------------------------------------------------------------


def test_web_format_matches_afm() -> None:
    hits = [
        SearchHit("T1", "https://a.example/1", "first snippet", date="2024-01-02", source="A News"),
        SearchHit("T2", "https://b.example/2", "Your browser can't play this video. second"),
    ]
    assert format_web_results("q", hits) == (
        "Found 2 results:\n\n## Web Results\n"
        "1. [T1](https://a.example/1)\nDate published: 2024-01-02\nSource: A News\n"
        "https://a.example/1\nfirst snippet"
        "\n\n2. [T2](https://b.example/2)\nhttps://b.example/2\n second"
    )


def test_wiki_format_matches_search_r1() -> None:
    hits = [
        SearchHit('"Alpha"', "wiki://1", "alpha text"),
        SearchHit("Beta", "", "short", content="full beta"),
    ]
    assert format_wiki_results(hits) == 'Doc 1 (Title: "Alpha")\nalpha text\n\nDoc 2 (Title: Beta)\nfull beta'


class _Broken:
    name = "broken"

    def search(self, query: str, top_k: int = 10) -> list[SearchHit]:
        raise SearchError("upstream down")


def test_tool_wrappers_turn_errors_into_observations() -> None:
    assert json.loads(web_search(_Broken(), "q")) == {"error": "SearchError: upstream down"}
    assert wiki_search(_Broken(), "q") == "Search error: upstream down"


# -- fake HTTP servers -------------------------------------------------------------------------------

Handler = Callable[[dict[str, Any], dict[str, str]], tuple[int, Any]]


class FakeServer:
    """A JSON POST server on 127.0.0.1: ``handler(body, headers) -> (status, json)``; records requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        outer = self

        class _H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((self.path, body, headers))
                status, payload = outer.handler(body, headers)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_port}"

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], FakeServer]]:
    servers: list[FakeServer] = []

    def start(handler: Handler) -> FakeServer:
        server = FakeServer(handler).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


SERPER_KEY = "sk-test-0123456789abcdef"
ORGANIC = {
    "organic": [
        {
            "title": "Kelo Corp",
            "link": "https://kelo.example/",
            "snippet": "Kelo Corp was founded by Mira Tola.",
            "date": "Mar 3, 2021",
        },
        {
            "title": "Tola",
            "link": "https://wiki.example/Tola",
            "snippet": "Mira Tola is an engineer.",
            "source": "Wiki",
        },
        {"title": "Extra", "link": "https://x.example/", "snippet": "more"},
    ]
}


def _serper_config(url: str, **kw: Any) -> SerperConfig:
    return SerperConfig(
        url=f"{url}/search", api_key_env="COA_TEST_SERPER_KEY", timeout_s=2, backoff_s=0.01, **kw
    )


def test_serper_posts_query_with_key_header(
    serve: Callable[[Handler], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COA_TEST_SERPER_KEY", SERPER_KEY)
    server = serve(lambda body, headers: (200, ORGANIC))
    provider = SerperSearch(_serper_config(server.url))
    hits = provider.search("who founded kelo corp", 2)
    path, body, headers = server.requests[0]
    assert path == "/search" and body == {"q": "who founded kelo corp", "num": 2}
    assert headers["x-api-key"] == SERPER_KEY and headers["content-type"] == "application/json"
    assert [h.title for h in hits] == ["Kelo Corp", "Tola"]
    assert hits[0].date == "Mar 3, 2021" and hits[1].source == "Wiki"
    text = web_search(provider, "who founded kelo corp", 2)
    assert text.startswith(
        "Found 2 results:\n\n## Web Results\n1. [Kelo Corp](https://kelo.example/)\nDate published:"
    )


def test_serper_errors_never_show_the_key(
    serve: Callable[[Handler], FakeServer], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("COA_TEST_SERPER_KEY", SERPER_KEY)
    server = serve(lambda body, headers: (401, {"message": "Unauthorized", "key": headers.get("x-api-key")}))
    provider = SerperSearch(_serper_config(server.url))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SearchError, match="HTTP 401") as err:
        provider.search("q")
    assert SERPER_KEY not in str(err.value)
    observation = web_search(provider, "q")
    assert "HTTP 401" in observation and SERPER_KEY not in observation
    assert SERPER_KEY not in caplog.text
    assert len(server.requests) == 2  # no retry on 401


def test_serper_needs_its_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COA_TEST_SERPER_KEY", raising=False)
    with pytest.raises(SearchError, match="COA_TEST_SERPER_KEY"):
        SerperSearch(_serper_config("http://127.0.0.1:9")).search("q")


def test_serper_retries_server_errors_then_succeeds(
    serve: Callable[[Handler], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COA_TEST_SERPER_KEY", SERPER_KEY)
    calls = {"n": 0}

    def flaky(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        calls["n"] += 1
        return (503, {"error": "busy"}) if calls["n"] < 3 else (200, ORGANIC)

    server = serve(flaky)
    assert len(SerperSearch(_serper_config(server.url, max_retries=2)).search("q", 10)) == 3
    assert calls["n"] == 3


def test_serper_timeout_is_bounded(
    serve: Callable[[Handler], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COA_TEST_SERPER_KEY", SERPER_KEY)

    def slow(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        time.sleep(1.5)
        return 200, ORGANIC

    server = serve(slow)
    provider = SerperSearch(
        SerperConfig(
            url=f"{server.url}/search", api_key_env="COA_TEST_SERPER_KEY", timeout_s=0.3, max_retries=0
        )
    )
    start = time.monotonic()
    with pytest.raises(SearchError, match="timed out"):
        provider.search("q")
    assert time.monotonic() - start < 1.4


def test_serper_empty_and_malformed_responses(
    serve: Callable[[Handler], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COA_TEST_SERPER_KEY", SERPER_KEY)
    empty = serve(lambda body, headers: (200, {"searchParameters": {}}))
    assert web_search(SerperSearch(_serper_config(empty.url)), "zz") == (
        "No results found for query: 'zz'. Use a less specific query."
    )
    junk = serve(lambda body, headers: (200, b"<html>not json</html>"))
    assert "not JSON" in json.loads(web_search(SerperSearch(_serper_config(junk.url)), "zz"))["error"]


def _retrieve_handler(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    docs = [
        {
            "document": {"id": "17", "contents": '"Kelo Corp"\nKelo Corp was founded by Mira Tola.'},
            "score": 0.91,
        },
        {
            "document": {
                "id": "4",
                "contents": '"Mira Tola"\nMira Tola was born in Tarvo.\nShe is an engineer.',
            },
            "score": 0.77,
        },
        {"document": {"id": "9", "contents": '"Other"\nunrelated'}, "score": 0.1},
    ]
    return 200, {"result": [docs[: body["topk"]] if body["return_scores"] else [d["document"] for d in docs]]}


def test_retrieve_server_request_and_wiki_observation(serve: Callable[[Handler], FakeServer]) -> None:
    server = serve(_retrieve_handler)
    provider = RetrieveServerSearch(RetrieveConfig(url=f"{server.url}/retrieve", timeout_s=2))
    hits = provider.search("founder of kelo corp", 2)
    path, body, _ = server.requests[0]
    assert path == "/retrieve" and body == {
        "queries": ["founder of kelo corp"],
        "topk": 2,
        "return_scores": True,
    }
    assert [(h.title, h.url, h.score) for h in hits] == [
        ('"Kelo Corp"', "wiki://17", 0.91),
        ('"Mira Tola"', "wiki://4", 0.77),
    ]
    assert wiki_search(provider, "founder of kelo corp", 2) == (
        'Doc 1 (Title: "Kelo Corp")\nKelo Corp was founded by Mira Tola.\n\n'
        'Doc 2 (Title: "Mira Tola")\nMira Tola was born in Tarvo.\nShe is an engineer.'
    )


def test_retrieve_server_url_from_env_retries_and_errors(
    serve: Callable[[Handler], FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}

    def flaky(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
        calls["n"] += 1
        return (500, {"detail": "oops"}) if calls["n"] == 1 else _retrieve_handler(body, headers)

    server = serve(flaky)
    monkeypatch.setenv("COA_TEST_RAG_URL", f"{server.url}/retrieve")
    provider = RetrieveServerSearch(RetrieveConfig(url_env="COA_TEST_RAG_URL", timeout_s=2, backoff_s=0.01))
    assert len(provider.search("q", 3)) == 3 and calls["n"] == 2

    bad = serve(lambda body, headers: (200, {"unexpected": True}))
    provider = RetrieveServerSearch(RetrieveConfig(url=f"{bad.url}/retrieve", timeout_s=2))
    assert wiki_search(provider, "q") == "Search error: retrieve: unexpected response (no result list)"

    monkeypatch.delenv("COA_TEST_RAG_URL")
    unset = RetrieveServerSearch(RetrieveConfig(url_env="COA_TEST_RAG_URL"))
    assert "COA_TEST_RAG_URL" in wiki_search(unset, "q")


def test_retrieve_server_connection_refused_is_bounded() -> None:
    server = FakeServer(_retrieve_handler)
    url = server.url
    server.httpd.server_close()  # nothing listens on the port any more
    provider = RetrieveServerSearch(
        RetrieveConfig(url=f"{url}/retrieve", timeout_s=1, max_retries=1, backoff_s=0.01)
    )
    start = time.monotonic()
    assert wiki_search(provider, "q").startswith("Search error: retrieve: connection error")
    assert time.monotonic() - start < 5
