"""The model server's request gate, as plain ASGI: a body over the limit is a 413 before the
model sees it (declared, or counted as it arrives when chunked), and a V2 ``/infer`` POST with
no Content-Type is JSON unless it carries the binary extension's header."""

from __future__ import annotations

import asyncio
import json

from fmnist_kfp.serving.model_server.request_gate import RequestGate


def _call(headers, chunks, path="/v2/models/fashion-mnist/infer", limit=10):
    seen, sent = {}, []

    async def app(scope, receive, send):
        seen["headers"] = dict(scope["headers"])
        seen["body"] = (await receive())["body"]

    async def receive():
        body = chunks.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(chunks)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    asyncio.run(RequestGate(app, max_bytes=limit)(scope, receive, send))
    return seen, sent


def test_a_body_over_the_limit_is_refused_before_the_model():
    seen, sent = _call([(b"content-length", b"11")], [b"x" * 11])
    assert not seen and sent[0]["status"] == 413
    assert "11 bytes exceeds the 10-byte limit" in json.loads(sent[1]["body"])["error"]
    # Chunked: no declared length, counted as it arrives.
    seen, sent = _call([(b"content-type", b"application/json")], [b"x" * 6, b"x" * 6])
    assert not seen and sent[0]["status"] == 413


def test_a_body_within_the_limit_reaches_the_model_whole():
    seen, sent = _call([(b"content-type", b"application/json")], [b"12345", b"678"])
    assert seen["body"] == b"12345678" and not sent


def test_an_untyped_v2_infer_post_is_json_unless_it_is_binary():
    seen, _ = _call([], [b"{}"])
    assert seen["headers"][b"content-type"] == b"application/json"
    seen, _ = _call([(b"inference-header-content-length", b"2")], [b"{}"])
    assert b"content-type" not in seen["headers"]
    seen, _ = _call([], [b"{}"], path="/v1/models/fashion-mnist:predict")
    assert b"content-type" not in seen["headers"]
