"""The plumbing the HTTP stand-ins share: a threaded server on 127.0.0.1 and JSON replies."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def reply_bytes(handler: BaseHTTPRequestHandler, data: bytes, code: int = 200,
                content_type: str = "application/json") -> None:
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def reply_json(handler: BaseHTTPRequestHandler, body: dict, code: int = 200) -> None:
    reply_bytes(handler, json.dumps(body).encode(), code)


class JsonRequestHandler(BaseHTTPRequestHandler):
    """A quiet request handler for JSON APIs: the stand-ins' handlers extend it."""

    def log_message(self, *args):
        pass

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None


def recording_handler(standin) -> type[JsonRequestHandler]:
    """A handler that appends ``(method, path, body)`` to ``standin.calls`` and hands each
    request to ``standin.on_post`` / ``on_get`` / ``on_delete``."""

    class Handler(JsonRequestHandler):
        def do_POST(self):
            body = self._body()
            standin.calls.append(("POST", self.path, body))
            standin.on_post(self, body)

        def do_GET(self):
            standin.calls.append(("GET", self.path, None))
            standin.on_get(self)

        def do_DELETE(self):
            standin.calls.append(("DELETE", self.path, self._body()))
            standin.on_delete(self)

    return Handler


class LoopbackServer:
    """Serves ``handler_class`` on a free loopback port for the length of a ``with`` block."""

    def _serve(self, handler_class: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
