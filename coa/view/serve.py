"""Serving one viewer page on 127.0.0.1: the page and nothing else, for a bounded time.

:class:`PageServer` answers ``GET /`` (and ``/index.html``) with the page's bytes, 404 otherwise; it
binds the loopback address only, on the port asked (0 = any free one), and stops when
:meth:`PageServer.stop` is called, when its context exits, or, in :func:`serve_for`, after the
given number of seconds or at Ctrl-C.
"""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from coa.errors import UserError

HOST = "127.0.0.1"


class PageServer:
    """One page served on 127.0.0.1 from a background thread."""

    def __init__(self, page: str | Path, port: int = 0) -> None:
        body = Path(page).read_bytes()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
                if self.path.split("?")[0] not in ("/", "/index.html"):
                    self.send_error(404, "only / is served")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the hook's name
                return  # quiet: the CLI prints the address once

        try:
            self._server = http.server.ThreadingHTTPServer((HOST, port), Handler)
        except OSError as e:
            raise UserError(
                f"cannot serve on {HOST}:{port} ({e}): give another --port (0 = any free one)"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="coa-view", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self._server.server_address[1]}/"

    def start(self) -> PageServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> PageServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def serve_for(page: str | Path, port: int, seconds: float, announce: Any = print) -> None:
    """Serve ``page`` for ``seconds`` (or until Ctrl-C), announcing the address first."""
    if seconds <= 0:
        raise UserError(f"--serve-for {seconds}: give a positive number of seconds")
    with PageServer(page, port) as server:
        announce(f"serving {page} at {server.url} for {seconds:g} s (Ctrl-C stops it)")
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        except KeyboardInterrupt:
            pass
