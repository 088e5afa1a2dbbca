"""An S3 endpoint that fails on purpose: a small HTTP proxy on 127.0.0.1 in front of moto's server.

moto serves the S3 API faithfully but never fails; real S3 answers ``500 InternalError`` and
``503 SlowDown`` now and then, and a client can die between two requests. The proxy forwards every
request to moto unchanged (the signature's Host header included: moto does not check it) and, by
the rules a test sets, answers some of them with an S3 error instead, so the real client stack runs
its own retry logic (botocore's ``standard`` mode under s3fs, ``COA_S3_MAX_ATTEMPTS``):

* :meth:`FaultyS3.fail`: the next ``times`` requests of the given operations (``PUT``, ``GET``,
  ``HEAD``, ``LIST``, ``COPY``, ``DELETE``, ``POST``) whose key contains ``match`` get an error,
  either instead of reaching moto or (``after=True``) after moto applied them (the reply was lost);
  ``times=None`` fails every one until :meth:`clear`;
* :meth:`FaultyS3.hold`: the ``nth`` write (PUT, COPY, DELETE, POST) from now is held unanswered
  and an event is set, so a test can SIGKILL the writer at that exact request; :meth:`release`
  then drops it (it never reached S3) or forwards it (it did, the writer never heard back).

Every request is logged as ``(operation, key)`` in :attr:`FaultyS3.log`.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import threading
import urllib.parse
from typing import Any

WRITES = frozenset({"PUT", "COPY", "DELETE", "POST"})
_ERRORS = {
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "SlowDown": (503, "Please reduce your request rate."),
}
_DROPPED_HEADERS = {"connection", "keep-alive", "transfer-encoding", "expect", "content-length"}


@dataclasses.dataclass
class Fault:
    """One rule: which requests fail, how, and how many times."""

    ops: frozenset[str]
    error: str
    times: int | None
    match: str = ""
    after: bool = False
    skip: int = 0
    hits: int = 0
    seen: int = 0

    def applies(self, op: str, key: str) -> bool:
        """Whether this request fails (counting it: the first ``skip`` matching requests pass)."""
        if op not in self.ops or self.match not in key:
            return False
        self.seen += 1
        return self.seen > self.skip and (self.times is None or self.hits < self.times)


def operation(method: str, path: str, query: dict[str, list[str]], headers: Any) -> str:
    """The S3 operation of a request, coarsely: what a fault rule names."""
    key = path.lstrip("/").partition("/")[2]
    if method == "PUT":
        return "COPY" if headers.get("x-amz-copy-source") else "PUT"
    if method == "GET":
        return "LIST" if not key or "list-type" in query or "prefix" in query else "GET"
    return method  # HEAD, DELETE, POST (multipart create/complete, multi-object delete)


class FaultyS3:
    """The proxy: ``start()``, point the client at :attr:`endpoint`, set rules, ``stop()``."""

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str]] = []
        self.injected = 0
        self._lock = threading.Lock()
        self._hold_at: int | None = None
        self._writes = 0
        self.held = threading.Event()
        self._release = threading.Event()
        self._forward_held = False
        self._held_done = threading.Event()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultyS3:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release(forward=False)
        self._server.shutdown()
        self._server.server_close()

    # -- rules ------------------------------------------------------------------------------------
    def fail(
        self,
        ops: str | set[str],
        error: str,
        times: int | None = 1,
        match: str = "",
        after: bool = False,
        skip: int = 0,
    ) -> Fault:
        """Fail matching requests with ``error`` (``InternalError`` or ``SlowDown``); see the module."""
        fault = Fault(frozenset({ops} if isinstance(ops, str) else ops), error, times, match, after, skip)
        with self._lock:
            self.faults.append(fault)
        return fault

    def hold(self, nth: int) -> None:
        """Hold the ``nth`` write request from now (1 = the next one) until :meth:`release`."""
        with self._lock:
            self._writes, self._hold_at = 0, nth
            self.held.clear()
            self._release.clear()
            self._held_done.clear()

    def release(self, forward: bool) -> None:
        """Let the held request go: ``forward`` it to S3 or drop it; returns once it is settled."""
        self._forward_held = forward
        was_held = self.held.is_set() and not self._release.is_set()
        self._release.set()
        if was_held:
            self._held_done.wait(timeout=30)

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()
            self._hold_at = None
        self.release(forward=False)

    def ops(self, *kinds: str) -> list[tuple[str, str]]:
        return [entry for entry in self.log if entry[0] in kinds]

    # -- serving ----------------------------------------------------------------------------------
    def _handle(self, req: http.server.BaseHTTPRequestHandler) -> None:
        try:
            self._serve(req)
        except (BrokenPipeError, ConnectionResetError):  # the client was killed meanwhile
            req.close_connection = True

    def _serve(self, req: http.server.BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(req.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        op = operation(req.command, url.path, query, req.headers)
        key = urllib.parse.unquote(url.path)
        body = self._body(req)
        hold = False
        fault: Fault | None = None
        with self._lock:
            self.log.append((op, key))
            if op in WRITES and self._hold_at is not None:
                self._writes += 1
                hold = self._writes == self._hold_at
            if not hold:
                fault = next((f for f in self.faults if f.applies(op, key)), None)
                if fault is not None:
                    fault.hits += 1
                    self.injected += 1
        if hold:
            self.held.set()
            self._release.wait()
            try:
                if self._forward_held:  # it reached S3; the client never hears back
                    self._forward(req, body)
            finally:
                self._held_done.set()
            req.close_connection = True
            return
        if fault is not None and not fault.after:
            self._error(req, fault.error)
            return
        status, headers, reply = self._forward(req, body)
        if fault is not None:  # moto applied it; the client hears an error and retries
            self._error(req, fault.error)
            return
        req.send_response(status)
        for name, value in headers:
            if name.lower() not in _DROPPED_HEADERS:
                req.send_header(name, value)
        length = dict((k.lower(), v) for k, v in headers).get("content-length", "0")
        req.send_header("Content-Length", length if req.command == "HEAD" else str(len(reply)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(reply)

    @staticmethod
    def _body(req: http.server.BaseHTTPRequestHandler) -> bytes:
        if "chunked" in req.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(req.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while req.rfile.readline().strip():  # trailers
                        pass
                    return b"".join(chunks)
                chunks.append(req.rfile.read(size))
                req.rfile.readline()
        return req.rfile.read(int(req.headers.get("Content-Length") or 0))

    def _forward(
        self, req: http.server.BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in req.headers.items() if k.lower() not in _DROPPED_HEADERS}
            headers["Content-Length"] = str(len(body))
            conn.request(req.command, req.path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.getheaders(), resp.read()
        finally:
            conn.close()

    @staticmethod
    def _error(req: http.server.BaseHTTPRequestHandler, code: str) -> None:
        status, message = _ERRORS[code]
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            "<RequestId>faulty-s3</RequestId></Error>"
        ).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/xml")
        req.send_header("Content-Length", "0" if req.command == "HEAD" else str(len(xml)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(xml)
