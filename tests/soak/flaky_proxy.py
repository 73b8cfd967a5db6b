"""A flaky connection in front of the local REST API, for the soak (issue 24, item 3).

`FlakyProxy` listens on 127.0.0.1 and forwards every request to the API as it came (method,
path, headers, body: a SigV4 signature stays valid, the Host header the client signed is the
one forwarded). Of the state-changing calls (POST), every `drop_every`-th has its answer lost:
the API has received and handled the request, then the proxy closes the client's connection
without a byte of the answer, as a load balancer or a dying connection does. A client that
cannot tell whether its request was filed must retry it with the same Idempotency-Key.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "proxy-connection"})


class FlakyProxy:
    def __init__(self, api_url: str, *, drop_every: int = 2) -> None:
        target = urlsplit(api_url)
        self._host = target.hostname or "127.0.0.1"
        self._port = target.port or 80
        self._prefix = target.path.rstrip("/")
        self._drop_every = drop_every
        self._lock = threading.Lock()
        self.posts = 0
        self.dropped = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy._forward(self)

            def do_POST(self) -> None:
                proxy._forward(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The proxy's URL for the API's root (what a state file's `api_url` holds)."""
        return f"http://127.0.0.1:{self._server.server_port}{self._prefix}/"

    def start(self) -> FlakyProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _lose_answer(self, method: str) -> bool:
        if method != "POST":
            return False
        with self._lock:
            self.posts += 1
            lose = self.posts % self._drop_every == 0
            self.dropped += lose
            return lose

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(self._host, self._port, timeout=600)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            answer = upstream.getresponse()
            payload = answer.read()
        finally:
            upstream.close()
        if self._lose_answer(handler.command):  # handled by the API, the answer never sent
            handler.close_connection = True
            return
        handler.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
