"""The one reader of API errors (fmnist_kfp/kubernetes/api_errors.py), with each shape of error
its three callers meet: the remote-job runner's (an ``ApiException`` behind a kubeflow SDK's
``RuntimeError``, urllib3's and the socket's errors), preflight's (the ``kubernetes`` client's
``ApiException`` as it raised it) and the KFP client's (``kfp_server_api``'s, bodies of JSON,
bytes or a login page)."""

from __future__ import annotations

import http.client
import json

import pytest
import urllib3
from kfp_server_api.exceptions import ApiException as KfpApiException
from kubernetes.client.exceptions import ApiException

from fmnist_kfp.kubernetes.api_errors import (
    ErrorBody,
    api_message,
    api_status,
    exception_chain,
    is_transient,
    own_status,
    read_body,
    refusal_message,
    server_words,
    status_line,
    status_message,
    status_object,
)

REASONS = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
           410: "Gone", 422: "Unprocessable Entity", 500: "Internal Server Error",
           502: "Bad Gateway"}


def api_error(status: int, message: str = "", *, body=None, kind=ApiException):
    """An ``ApiException`` as the client raises it: a ``Status`` body with ``message``, unless
    ``body`` is given."""
    error = kind(status=status, reason=REASONS.get(status, ""))
    error.body = json.dumps({"kind": "Status", "message": message}) if body is None else body
    return error


def sdk_wrapped(error: BaseException) -> RuntimeError:
    """What the kubeflow SDKs raise: RuntimeError with the ApiException as __context__."""
    try:
        raise error
    except Exception:
        try:
            raise RuntimeError("Failed to get TFJob: team-a/job")  # noqa: B904 (as the SDK)
        except RuntimeError as wrapped:
            return wrapped


def _raised_from(error: BaseException) -> RuntimeError:
    """An error raised ``from`` ``error`` (its __cause__), as Katib's wrapper does."""
    wrapper = RuntimeError("wrapped")
    wrapper.__cause__ = error
    return wrapper


# ---------------------------------------------------------------------------------------------
# The runner's reading: through the chain


def test_the_status_is_found_behind_a_wrapper():
    assert api_status(sdk_wrapped(api_error(503))) == 503
    assert api_status(_raised_from(api_error(409))) == 409
    assert api_status(api_error(404)) == 404
    assert api_status(sdk_wrapped(api_error(403, kind=KfpApiException))) == 403
    assert api_status(ValueError("no API here")) is None


def test_error_classification():
    assert is_transient(sdk_wrapped(api_error(500)))
    assert not is_transient(sdk_wrapped(api_error(404)))
    assert not is_transient(sdk_wrapped(api_error(400)))
    assert not is_transient(ValueError("a bug"))


def test_error_chains_are_walked_once_even_when_they_loop():
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__context__, second.__context__ = second, first
    assert list(exception_chain(first)) == [first, second]
    assert api_status(first) is None and not is_transient(first)

    class Response(Exception):  # has a status, but is no ApiException
        status = 503

    assert api_status(Response()) is None and not is_transient(Response())


def test_api_messages():
    assert api_message(api_error(403, "denied")) == "HTTP 403 Forbidden: denied"
    assert api_message(ValueError("x")) == "ValueError: x"
    plain = ApiException(status=500, reason="")
    plain.body = "upstream connect error"
    assert api_message(plain) == "HTTP 500: upstream connect error"
    empty = ApiException(status=404, reason="Not Found")
    empty.body = json.dumps({"kind": "Status"})
    assert api_message(empty) == "HTTP 404 Not Found"
    no_body = ApiException(status=409, reason="Conflict")
    assert api_message(no_body) == "HTTP 409 Conflict"
    assert api_message(sdk_wrapped(api_error(403, "denied"))) == "HTTP 403 Forbidden: denied"


def test_the_runner_shows_a_body_that_is_no_status_object_whole():
    # The step's log is all a user learns of why: a proxy's page or a JSON list is kept.
    assert api_message(api_error(502, body="<html>no healthy upstream</html>")) \
        == "HTTP 502 Bad Gateway: <html>no healthy upstream</html>"
    assert api_message(api_error(500, body='["a", "b"]')) \
        == 'HTTP 500 Internal Server Error: ["a", "b"]'
    assert api_message(api_error(403, body=b'{"message": "denied"}')) \
        == "HTTP 403 Forbidden: denied"
    assert api_message(api_error(500, body="")) == "HTTP 500 Internal Server Error"


@pytest.mark.parametrize(("error", "transient"), [
    (api_error(408), True), (api_error(429), True), (api_error(500), True),
    (api_error(599), True), (api_error(400), False), (api_error(401), False),
    (api_error(404), False), (api_error(409), False), (api_error(422), False),
    (TimeoutError("timed out"), True), (ConnectionRefusedError(), True),
    (urllib3.exceptions.ProtocolError("Connection aborted."), True),
    (http.client.RemoteDisconnected("closed"), True),
    (ValueError("a bug"), False), (KeyError("status"), False),
])
def test_what_counts_as_transient(error, transient):
    assert is_transient(sdk_wrapped(error)) is transient


def test_the_kserve_rollout_reads_the_status_object_alone():
    """serving/deploy/kserve_api.py: a 404 with a ``NotFound`` Status is an absent object, a
    bare 404 page an API the server does not serve; its messages hold the Status's words."""
    absent = api_error(404, 'inferenceservices "fmnist" not found')
    absent.body = json.dumps({"kind": "Status", "reason": "NotFound",
                              "message": 'inferenceservices "fmnist" not found'})
    assert status_object(absent)["reason"] == "NotFound"
    assert status_message(absent) == 'inferenceservices "fmnist" not found'
    page = api_error(404, body="404 page not found")
    assert status_object(page) == {}
    assert status_message(page) == "Not Found"
    not_status = api_error(500, body=json.dumps({"message": "a gateway's words"}))
    assert status_object(not_status) == {} and status_message(not_status) == \
        "Internal Server Error"
    assert status_object(ValueError("no body")) == {}


# ---------------------------------------------------------------------------------------------
# Preflight's reading: the error itself


def test_preflight_reads_the_status_the_error_itself_carries():
    assert own_status(api_error(404)) == 404
    assert own_status(sdk_wrapped(api_error(404))) is None  # an error raised while handling
    assert own_status(OSError("no route")) is None


def test_the_status_line_is_the_status_and_reason_else_the_error():
    assert status_line(api_error(403, "denied")) == "HTTP 403 Forbidden"
    assert status_line(api_error(500, body="", kind=KfpApiException)) \
        == "HTTP 500 Internal Server Error"
    assert status_line(ApiException(status=599)) == "HTTP 599"
    refused = urllib3.exceptions.MaxRetryError(None, "/version", "refused")
    assert status_line(refused) == f"MaxRetryError: {refused}"
    assert status_line(OSError("no route")) == "OSError: no route"


def test_a_refusal_shows_the_status_message_only():
    assert refusal_message(api_error(403, "denied by the webhook")) \
        == "HTTP 403 Forbidden: denied by the webhook"
    assert refusal_message(api_error(404)) == "HTTP 404 Not Found"  # a Status without words
    # A proxy's page would not fit preflight's table: the status alone.
    assert refusal_message(api_error(502, body="<html>Bad Gateway</html>")) \
        == "HTTP 502 Bad Gateway"
    assert refusal_message(api_error(500, body='["a"]')) == "HTTP 500 Internal Server Error"
    assert refusal_message(ApiException(status=409, reason="Conflict")) == "HTTP 409 Conflict"
    assert refusal_message(OSError("no route")) == "OSError: no route"


# ---------------------------------------------------------------------------------------------
# The KFP client's reading: the body's words, shortened


@pytest.mark.parametrize(("body", "words"), [
    ('{"error": "x", "message": "pipeline not found", "code": 5}', "pipeline not found"),
    ('{"error_message": "name taken", "error_details": "..."}', "name taken"),
    ('{"error": "no valid token"}', "no valid token"),
    ('{"code": 16}', "{'code': 16}"),
    ('["a"]', "['a']"),
    ("42", "42"),
    (b"<html><body>Log in to\n   Kubeflow</body></html>",
     "<html><body>Log in to Kubeflow</body></html>"),
    (b'{"message": "denied"}', "denied"),
    ("", ""),
    (None, ""),
])
def test_what_a_kfp_api_server_says(body, words):
    assert server_words(body) == words


def test_what_a_kfp_api_server_says_is_cut_to_fit_a_line():
    assert server_words("x" * 400) == "x" * 300
    assert server_words(json.dumps({"message": "y" * 400})) == "y" * 300
    assert server_words("a b c", limit=3) == "a b"


def test_a_body_is_read_as_text_then_json():
    assert read_body(None) == read_body("") == ErrorBody("")
    read = read_body(b'{"message": "m", "reason": ""}')
    assert read.parsed and read.is_object and read.text == '{"message": "m", "reason": ""}'
    assert read.field("reason", "message") == "m"  # the first non-empty one
    assert read.field("details") == ""
    listing = read_body("[1]")
    assert listing.parsed and not listing.is_object and listing.field("message") == ""
    page = read_body(b"\xff<html>")
    assert not page.parsed and page.text == "\ufffd<html>"
