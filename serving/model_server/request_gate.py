"""ASGI middleware in front of KServe's REST routes (:class:`RequestGate`): plain ASGI, so it
depends on no KServe internals; :mod:`fmnist_kfp.serving.model_server.kserve_internals` installs
it."""

from __future__ import annotations

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
_INFER_SUFFIX = b"/infer"
_BINARY_HEADER = b"inference-header-content-length"


class RequestGate:
    """ASGI middleware in front of KServe's routes, for two things KServe leaves to us.

    * A body over ``max_bytes`` gets a 413 before the model sees it (on the declared length,
      and on what actually arrives: chunked bodies declare none).
    * A V2 ``/infer`` POST without a Content-Type is JSON unless it carries the binary
      extension's ``Inference-Header-Content-Length``: the protocol says so, and that is what
      tritonclient sends in JSON mode. FastAPI >= 0.132 (strict Content-Type) hands such a body
      to KServe as bytes, and KServe 0.21 then answers 400 (fastapi ``routing.py`` L471–488,
      kserve 0.21 ``protocol/dataplane.py`` L393–403), so the header is filled in here.
    """

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def _reject(self, send, size_hint: str) -> None:
        import orjson

        body = orjson.dumps({"error": (
            f"request body {size_hint}exceeds the {self.max_bytes}-byte limit; send fewer or "
            "smaller images per request, or raise --max_body_bytes")})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        has_type = binary = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    return await self._reject(send, f"of {declared} bytes ")
            elif name == b"content-type":
                has_type = True
            elif name == _BINARY_HEADER:
                binary = True
        if (not has_type and not binary and scope["method"] == "POST"
                and scope["path"].encode().endswith(_INFER_SUFFIX)):
            scope = {**scope, "headers": [*scope["headers"],
                                          (b"content-type", b"application/json")]}
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._reject(send, "")
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)
