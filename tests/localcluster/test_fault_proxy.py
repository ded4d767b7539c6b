"""The fault proxy (localcluster/fault_proxy.py) in front of the real API server: without faults
it is faithful (what a create, a get, a watch and a pod's log answer through it is what they
answer directly, and the API server judges the caller's own token); with a seed, each fault kind
is given as specified: a Status answered instead of forwarding (nothing applied), a connection
dropped before forwarding (nothing applied), a lost answer (applied, then dropped: the retry is
answered 409 AlreadyExists), a stalled read, a watch cut mid-stream; repeatably per seed."""

from __future__ import annotations

import functools
import http.client
import json
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from localcluster.fault_proxy import KINDS, FaultProxy, streaming
from tests.cluster import until

WAIT_SECONDS = 60
# Watches and streams are asked after often: what arrives when is what these tests check.
_until = functools.partial(until, every=0.05)  # within 60 s, as WAIT_SECONDS


@pytest.fixture
def namespace(real_cluster):
    name = f"proxy-{uuid.uuid4().hex[:6]}"
    real_cluster.ensure_namespace(name)
    return name


def _core(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


def _config_map(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": data or {"a": "1"}}


def _proxy(real_cluster, seed=None, **options) -> FaultProxy:
    return FaultProxy(real_cluster.kubeconfig, seed, **options).start()


def _raw(proxy: FaultProxy, method: str, path: str, body: dict | None = None):
    """One request through ``proxy`` with http.client (no retries): (connection, response)."""
    import ssl

    connection = http.client.HTTPSConnection(
        "127.0.0.1", proxy.port, timeout=WAIT_SECONDS,
        context=ssl.create_default_context(cafile=str(proxy.ca_file)))
    headers = {"Authorization": f"Bearer {proxy.token}", "Accept": "application/json"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    connection.request(method, path, body=data, headers=headers)
    return connection, connection.getresponse()


def _exists(real_cluster, namespace: str, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        _core(real_cluster.api_client).read_namespaced_config_map(name, namespace)
    except ApiException as error:
        assert error.status == 404
        return False
    return True


# --- faithful ----------------------------------------------------------------------------


def test_creates_gets_and_errors_through_the_proxy_are_the_api_servers(real_cluster, namespace,
                                                                     tmp_path):
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException

    proxy = _proxy(real_cluster)
    try:
        through, direct = _core(proxy.api_client()), _core(real_cluster.api_client)
        created = through.create_namespaced_config_map(namespace, _config_map("a", x="y"))
        read = direct.read_namespaced_config_map("a", namespace)
        assert (created.metadata.uid, created.metadata.resource_version, created.data) == (
            read.metadata.uid, read.metadata.resource_version, {"x": "y"})
        assert through.read_namespaced_config_map("a", namespace).to_dict() == read.to_dict()
        written = config.new_client_from_config(str(proxy.kubeconfig(tmp_path / "kubeconfig")))
        assert _core(written).read_namespaced_config_map("a", namespace).to_dict() == \
            read.to_dict()
        assert [c.metadata.name for c in through.list_namespaced_config_map(
            namespace, label_selector="").items if c.metadata.name == "a"] == ["a"]
        answers = []
        for api in (through, direct):
            with pytest.raises(ApiException) as caught:
                api.create_namespaced_config_map(namespace, _config_map("a"))
            answers.append((caught.value.status, json.loads(caught.value.body)))
        assert answers[0] == answers[1] and answers[0][0] == 409
        assert answers[0][1]["reason"] == "AlreadyExists"
        through.delete_namespaced_config_map("a", namespace)
        assert not _exists(real_cluster, namespace, "a")
        # The caller's token is passed through: a bad one is the API server's 401, and a
        # ServiceAccount without a role is judged by RBAC as itself.
        with pytest.raises(ApiException) as caught:
            _core(proxy.api_client("not-a-token")).list_namespaced_config_map(namespace)
        assert caught.value.status == 401
        direct.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
        token = direct.create_namespaced_service_account_token(
            "nobody", namespace, {"spec": {"expirationSeconds": 600}}).status.token
        with pytest.raises(ApiException) as caught:
            _core(proxy.api_client(token)).list_namespaced_config_map(namespace)
        assert caught.value.status == 403
        assert f"system:serviceaccount:{namespace}:nobody" in json.loads(
            caught.value.body)["message"]
    finally:
        proxy.stop()
    assert not proxy.injected
    assert ("POST", f"/api/v1/namespaces/{namespace}/configmaps", 201) in proxy.requests


def _watch_events(api_client, namespace: str, resource_version: str, count: int,
                  out: list) -> None:
    from kubernetes import watch

    stream = watch.Watch().stream(_core(api_client).list_namespaced_config_map, namespace,
                                  resource_version=resource_version, timeout_seconds=30,
                                  _request_timeout=WAIT_SECONDS)
    for event in stream:
        out.append((event["type"], event["object"].metadata.name,
                    event["object"].metadata.resource_version, time.monotonic()))
        if len(out) == count:
            return


def test_a_watch_streams_through_the_proxy_as_it_does_directly(real_cluster, namespace):
    """Each event arrives as the API server sends it, not when the watch ends."""
    proxy = _proxy(real_cluster)
    direct = _core(real_cluster.api_client)
    try:
        since = direct.list_namespaced_config_map(namespace).metadata.resource_version
        seen: dict[str, list] = {"proxy": [], "direct": []}
        watchers = [threading.Thread(target=_watch_events, args=(
            client, namespace, since, 3, seen[name]), daemon=True)
            for name, client in (("proxy", proxy.api_client()),
                                 ("direct", real_cluster.api_client))]
        for watcher in watchers:
            watcher.start()
        made = {}
        for index in range(3):
            name = f"w{index}"
            direct.create_namespaced_config_map(namespace, _config_map(name))
            made[name] = time.monotonic()
            _until(lambda name=name: any(e[1] == name for e in seen["proxy"]), f"{name} seen",
                   10)
        for watcher in watchers:
            watcher.join(WAIT_SECONDS)
        assert [e[:3] for e in seen["proxy"]] == [e[:3] for e in seen["direct"]]
        assert [e[:2] for e in seen["proxy"]] == [("ADDED", f"w{i}") for i in range(3)]
    finally:
        proxy.stop()


def test_a_pods_log_through_the_proxy_is_the_api_servers(real_cluster, namespace):
    """A finished pod's log, and a followed one, read through the proxy equal what the API
    server answers directly."""
    real_cluster.require_node()
    direct = _core(real_cluster.api_client)
    _until(lambda: direct.list_namespaced_service_account(namespace).items, "a ServiceAccount")
    script = textwrap.dedent("""
        import time
        for i in range(5):
            print("line", i, flush=True)
            time.sleep(0.2)
    """)
    direct.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "registry.example.com/ml/fmnist-kfp:0.2.0",
            "command": ["python", "-c", script]}]}})
    proxy = _proxy(real_cluster)
    try:
        through = _core(proxy.api_client())
        _until(lambda: direct.read_namespaced_pod("talker", namespace).status.phase in (
            "Running", "Succeeded"), "the pod started")
        followed = through.read_namespaced_pod_log("talker", namespace, follow=True,
                                                   _request_timeout=WAIT_SECONDS)
        _until(lambda: direct.read_namespaced_pod("talker", namespace).status.phase
               == "Succeeded", "the pod finished")
        expected = "".join(f"line {i}\n" for i in range(5))
        assert direct.read_namespaced_pod_log("talker", namespace) == expected
        assert through.read_namespaced_pod_log("talker", namespace) == expected
        assert followed == expected
    finally:
        proxy.stop()


# --- faults ------------------------------------------------------------------------------


def test_an_injected_status_is_answered_instead_of_forwarding(real_cluster, namespace):
    """Each of 429 (with Retry-After), 500, 503 and 504 as a Kubernetes Status; the faulted
    create is not applied, and the next request of the same key is forwarded."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for code in (429, 500, 503, 504):
        proxy = _proxy(real_cluster, seed=code, rate=1.0, kinds=(code,))
        try:
            name = f"s{code}"
            _, answer = _raw(proxy, "POST", path, _config_map(name))
            status = json.loads(answer.read())
            assert (answer.status, status["kind"], status["code"]) == (code, "Status", code)
            assert status["reason"] == {429: "TooManyRequests", 500: "InternalError",
                                        503: "ServiceUnavailable", 504: "Timeout"}[code]
            assert (answer.getheader("Retry-After") == "1") == (code == 429)
            assert not _exists(real_cluster, namespace, name)
            _, again = _raw(proxy, "POST", path, _config_map(name))  # never twice in a row
            assert again.status == 201, again.read()
        finally:
            proxy.stop()
        assert [(i.method, i.path, i.kind) for i in proxy.injected] == [("POST", path, code)]


def test_409_conflict_is_injected_on_updates_only(real_cluster, namespace):
    proxy = _proxy(real_cluster, seed=1, rate=1.0, kinds=(409,))
    try:
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        _, created = _raw(proxy, "POST", path, _config_map("c"))
        stored = json.loads(created.read())
        assert created.status == 201  # a create is never given a made-up 409
        _, updated = _raw(proxy, "PUT", f"{path}/c", {**stored, "data": {"a": "2"}})
        status = json.loads(updated.read())
        assert (updated.status, status["reason"]) == (409, "Conflict")
        assert _core(real_cluster.api_client).read_namespaced_config_map(
            "c", namespace).data == {"a": "1"}
    finally:
        proxy.stop()
    assert [i.kind for i in proxy.injected] == [409]


def test_a_dropped_connection_forwards_nothing(real_cluster, namespace):
    import urllib3

    proxy = _proxy(real_cluster, seed=3, rate=1.0, kinds=("drop",))
    try:
        through = _core(proxy.api_client())
        with pytest.raises(urllib3.exceptions.HTTPError):  # POST: urllib3 does not retry it
            through.create_namespaced_config_map(namespace, _config_map("dropped"))
        assert not _exists(real_cluster, namespace, "dropped")
    finally:
        proxy.stop()
    assert [i.kind for i in proxy.injected] == ["drop"]


def test_a_lost_answer_was_applied_and_the_retry_is_told_it_exists(real_cluster, namespace):
    """The hard case: the create went through, the client saw a dropped connection; its retry
    is answered 409 AlreadyExists by the API server (what the remote-job runner re-attaches
    on)."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    proxy = _proxy(real_cluster, seed=4, rate=1.0, kinds=("lost",))
    try:
        through = _core(proxy.api_client())
        with pytest.raises(urllib3.exceptions.HTTPError):
            through.create_namespaced_config_map(namespace, _config_map("lost"))
        assert _exists(real_cluster, namespace, "lost")
        with pytest.raises(ApiException) as caught:
            through.create_namespaced_config_map(namespace, _config_map("lost"))
        assert (caught.value.status, json.loads(caught.value.body)["reason"]) == (
            409, "AlreadyExists")
    finally:
        proxy.stop()
    assert [i.kind for i in proxy.injected] == ["lost"]


def test_a_stalled_read_is_held_then_closed(real_cluster, namespace):
    proxy = _proxy(real_cluster, seed=5, rate=1.0, kinds=("stall",), hold=0.4)
    try:
        started = time.monotonic()
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            _raw(proxy, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert time.monotonic() - started >= 0.4
        _, answer = _raw(proxy, "GET", f"/api/v1/namespaces/{namespace}/configmaps")
        assert answer.status == 200
    finally:
        proxy.stop()
    assert [i.kind for i in proxy.injected] == ["stall"]


def test_a_watch_is_cut_mid_stream(real_cluster, namespace):
    """ConfigMaps created one by one while a watch through the proxy streams: the cut watch
    relays one to three of the API server's pieces, then closes without the last chunk (the
    client sees an incomplete read); the events it relayed are the first ones, whole."""
    direct = _core(real_cluster.api_client)
    since = direct.list_namespaced_config_map(namespace).metadata.resource_version
    proxy = _proxy(real_cluster, seed=6, rate=1.0, kinds=("cut",))
    received, ended = [b""], []

    def watch():
        _, answer = _raw(proxy, "GET", f"/api/v1/namespaces/{namespace}/configmaps?watch=true"
                                       f"&resourceVersion={since}&timeoutSeconds=30")
        try:
            while data := answer.read1(65536):
                received[0] += data
        except (http.client.IncompleteRead, ConnectionError) as error:
            ended.append(error)
        else:
            ended.append(None)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        watcher.start()
        for index in range(5):
            direct.create_namespaced_config_map(namespace, _config_map(f"e{index}"))
            _until(lambda index=index: ended or received[0].count(b"\n") > index,
                   f"e{index} relayed or the watch ended")
        watcher.join(WAIT_SECONDS)
    finally:
        proxy.stop()
    assert ended and ended[0] is not None, "the watch ended cleanly: not cut"
    events = [json.loads(line) for line in received[0].split(b"\n")[:-1]]
    assert received[0] and len(events) <= 3  # relayed something, then cut
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", f"e{i}") for i in range(len(events))]
    assert [(i.method, i.kind) for i in proxy.injected] == [("GET", "cut")]


def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig naming no server that answers: enough for a proxy's fault decisions,
    which need no connection."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "current-context": "c", "contexts": [{"name": "c", "context": {"cluster": "k",
                                                                       "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1",
                                               "certificate-authority": "ca.crt"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return kubeconfig


def test_the_faults_are_the_seeds_and_fit_their_requests(tmp_path):
    """The same seed gives the same faults to the same requests of a key, however keys
    interleave; another seed others. Never two in a row on a key; 409 to updates only; a
    lost answer or a stall never to a stream, a cut only to one."""
    kubeconfig = unreachable_kubeconfig(tmp_path)
    requests = [(method, f"/apis/g/v1/namespaces/n/things/{i % 3}{query}")
                for i in range(200) for method, query in (
                    ("GET", ""), ("POST", ""), ("PUT", ""), ("PATCH", ""), ("DELETE", ""),
                    ("GET", "?watch=true"), ("GET", "?follow=true"))]

    def faults(seed, order):
        proxy = FaultProxy(kubeconfig, seed, rate=0.3)
        decided = {}
        for method, target in order:  # by key: method, path, streaming or not
            key = (method, target.split("?")[0], streaming(method, target))
            decided.setdefault(key, []).append(proxy.decide(method, target)[1])
        return decided

    first = faults(11, requests)
    assert faults(11, sorted(requests, key=lambda r: r[0])) == first  # keys interleaved else
    assert faults(22, requests) != first
    given = set()
    for (method, _, stream), picks in first.items():
        assert all(a is None or b is None for a, b in zip(picks, picks[1:], strict=False))
        kinds = {p for p in picks if p is not None}
        given |= kinds
        if stream:
            assert not kinds & {"lost", "stall", 409}
        else:
            assert "cut" not in kinds
        if method not in ("PUT", "PATCH"):
            assert 409 not in kinds
        if method != "GET":
            assert "stall" not in kinds
    assert given == set(KINDS)


def test_in_a_row_faults_every_chosen_request_and_no_other(tmp_path):
    """``in_a_row`` at rate 1: a server that keeps failing the requests ``only`` chooses (a
    client's retries never get through) and answers the rest."""
    kubeconfig = unreachable_kubeconfig(tmp_path)
    failing = FaultProxy(kubeconfig, 3, rate=1.0, kinds=(500,), in_a_row=True,
                         only=lambda method, target: target.startswith("/apis/g/"))
    assert [failing.decide("GET", "/apis/g/v1")[1] for _ in range(5)] == [500] * 5
    assert failing.decide("GET", "/apis/h/v1")[1] is None
    retried = FaultProxy(kubeconfig, 3, rate=1.0, kinds=(500,))  # the default: never in a row
    assert [retried.decide("GET", "/apis/g/v1")[1] for _ in range(4)] == [500, None] * 2
