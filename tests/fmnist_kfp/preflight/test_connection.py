"""Reaching the cluster (fmnist_kfp.preflight.connection): in a pod (a Kubeflow notebook) the
in-cluster configuration, unless a kubeconfig is asked for; outside one the kubeconfig; the
first line says which was used. A kubeconfig here is one of the real API server's (tests/
fmnist_kfp/preflight/on_the_api_server.py); preflight run in a pod for real:
test_preflight_on_the_cluster.py."""

from __future__ import annotations

import pytest

from fmnist_kfp.cli import main as cli_main
from tests.fmnist_kfp.preflight.cluster import NS, missing_lines, preflight
from tests.standins.kfp import KfpStandIn


@pytest.fixture
def pod(monkeypatch, tmp_path):
    """A pod's environment: the API server's address in the environment, the ServiceAccount's
    token and CA where the kubernetes client reads them, no kubeconfig."""
    from kubernetes.config import incluster_config

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("token-of-the-pod")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nnot checked here\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return account


def test_in_a_pod_the_in_cluster_configuration_is_used(pod):
    from fmnist_kfp.preflight import kubernetes_api

    api_client, source = kubernetes_api()
    configuration = api_client.configuration
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.api_key["authorization"] == "bearer token-of-the-pod"
    assert configuration.ssl_ca_cert == str(pod / "ca.crt")
    assert source.startswith("in-cluster configuration") and str(pod / "token") in source


@pytest.mark.parametrize("given", ["--kubeconfig", "--context", "$KUBECONFIG", "~/.kube/config"])
def test_in_a_pod_a_kubeconfig_asked_for_wins(pod, kubeflow_api_server, given, monkeypatch,
                                              tmp_path):
    from fmnist_kfp.preflight import kubernetes_api

    path = str(kubeflow_api_server.kubeconfig(NS))
    arguments = {"--kubeconfig": (path, ""), "--context": (path, "local")}.get(given, ("", ""))
    if given == "$KUBECONFIG":
        monkeypatch.setenv("KUBECONFIG", path)
    if given == "~/.kube/config":
        (tmp_path / ".kube").mkdir()
        (tmp_path / ".kube" / "config").write_text(open(path).read())
    api_client, source = kubernetes_api(*arguments)
    assert api_client.configuration.host == kubeflow_api_server.plane.server
    assert source.startswith("kubeconfig ") and source.endswith("context local")


def test_preflight_in_a_pod_says_which_configuration_it_used(pod, monkeypatch, capsys):
    """From a notebook: no kubeconfig; the pod's API server address (here one that refuses
    connections) and its token."""
    import socket

    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))
    port = refused.getsockname()[1]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    try:
        with KfpStandIn() as kfp:
            code = cli_main(["preflight", "--host", kfp.url])
    finally:
        refused.close()
    out = capsys.readouterr().out
    assert code == 1, out
    assert out.splitlines()[0] == (f"Kubernetes API server https://127.0.0.1:{port} (in-cluster "
                                   f"configuration: this pod's ServiceAccount token, "
                                   f"{pod / 'token'})")
    [row] = missing_lines(out)
    assert "Kubernetes API server" in row and f"cannot reach https://127.0.0.1:{port}" in row


def test_in_a_pod_without_its_token_the_error_says_what_to_mount(pod, capsys):
    (pod / "token").unlink()
    with KfpStandIn() as kfp:
        assert cli_main(["preflight", "--host", kfp.url]) == 2
    err = capsys.readouterr().err
    assert "cannot load this pod's in-cluster configuration" in err
    assert "--kubeconfig" in err and "Traceback" not in err


def test_outside_a_pod_it_says_which_kubeconfig_it_used(kubeflow, capsys):
    cluster, kfp = kubeflow
    assert preflight(cluster, kfp) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"Kubernetes API server {cluster.plane.server} (kubeconfig "
                     f"{cluster.kubeconfig(NS)}, context local)")
