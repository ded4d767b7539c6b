"""The node agent (localcluster/node_agent.py) under the real control plane: pods created
through the API, scheduled by the real kube-scheduler, run as processes in network namespaces
of their own, their Jobs judged by the real Job controller, their logs read through the API."""

from __future__ import annotations

import textwrap
import time
import uuid
from pathlib import Path

import pytest

IMAGE = "registry.example.com/ml/fmnist-kfp:0.2.0"
WAIT_SECONDS = 90


@pytest.fixture
def cluster(real_cluster):
    real_cluster.require_node()
    return real_cluster


@pytest.fixture
def namespace(cluster):
    name = f"node-{uuid.uuid4().hex[:6]}"
    cluster.ensure_namespace(name)
    _wait_for_account(cluster, name)
    return name


def _core(cluster):
    from kubernetes import client

    return client.CoreV1Api(cluster.api_client)


def _wait_for_account(cluster, namespace: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not _core(cluster).list_namespaced_service_account(namespace).items:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def _pod(name: str, script: str, **spec) -> dict:
    container = {"name": "main", "image": IMAGE,
                 "command": ["python", "-c", textwrap.dedent(script)],
                 **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **spec.pop("meta", {})},
            "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


def _wait_phase(cluster, namespace: str, name: str, phases=("Succeeded", "Failed")):
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        pod = _core(cluster).read_namespaced_pod(name, namespace)
        if pod.status.phase in phases:
            return pod
        assert time.monotonic() < deadline, (pod.status.phase, pod.status.container_statuses)
        time.sleep(0.3)


def test_a_pod_runs_with_its_environment_volumes_and_service_account(cluster, namespace):
    """Env from a value, a ConfigMap, a Secret and the downward API; a ConfigMap volume; the
    ServiceAccount token the admission plugin projects, with which the pod's own in-cluster
    client reaches the API server, as allowed by a RoleBinding the real authorizer reads."""
    core = _core(cluster)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"},
                                                  "data": {"greeting": "hello"}})
    core.create_namespaced_secret(namespace, {"metadata": {"name": "keys"},
                                              "stringData": {"password": "s3cret"}})
    cluster.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "default-view"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "view"},
                    "subjects": [{"kind": "ServiceAccount", "name": "default",
                                  "namespace": namespace}]}, namespace=namespace)
    script = """
        import os, socket
        from kubernetes import client, config
        print("hostname", socket.gethostname())
        print("env", *(os.environ[k] for k in ("GREETING", "PASSWORD", "POD", "POD_IP", "PLAIN")))
        print("file", open("/etc/settings/greeting").read())
        config.load_incluster_config()
        me = client.CoreV1Api().read_namespaced_pod(os.environ["POD"], os.environ["NS"])
        print("read myself", me.metadata.uid)
    """
    env = [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings",
                                                                  "key": "greeting"}}},
           {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "keys",
                                                               "key": "password"}}},
           {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
           {"name": "PLAIN", "value": "$(POD)-plain"}]
    core.create_namespaced_pod(namespace, _pod(
        "probe", script, container={"env": env, "volumeMounts": [
            {"name": "settings", "mountPath": "/etc/settings"}]},
        volumes=[{"name": "settings", "configMap": {"name": "settings"}}]))
    pod = _wait_phase(cluster, namespace, "probe")
    log = core.read_namespaced_pod_log("probe", namespace)
    assert pod.status.phase == "Succeeded", log
    assert pod.spec.node_name == "local-node"
    assert "hostname probe" in log
    assert f"env hello s3cret probe {pod.status.pod_ip} probe-plain" in log
    assert "file hello" in log
    assert f"read myself {pod.metadata.uid}" in log
    # The token's folder exists for the pod alone: on the host, programs that look for it
    # (the Kubernetes clients' in-cluster detection) would take themselves for pods.
    assert not Path("/var/run/secrets/kubernetes.io").exists()
    [status] = pod.status.container_statuses
    assert status.state.terminated.exit_code == 0
    assert status.state.terminated.reason == "Completed"


def test_pods_reach_each_other_by_their_names_each_on_its_own_address(cluster, namespace):
    """Two pods listen on the same port, each in its own network namespace; a third finds each
    by ``<hostname>.<subdomain>.<namespace>.svc`` (a headless Service), as TF_CONFIG names them."""
    core = _core(cluster)
    core.create_namespaced_service(namespace, {
        "metadata": {"name": "workers"},
        "spec": {"clusterIP": "None", "selector": {"app": "worker"},
                 "publishNotReadyAddresses": True, "ports": [{"port": 2222}]}})
    server = """
        import http.server, socket
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers()
                self.wfile.write(socket.gethostname().encode())
        http.server.HTTPServer(("0.0.0.0", 2222), Handler).serve_forever()
    """
    for host in ("worker-0", "worker-1"):
        core.create_namespaced_pod(namespace, _pod(
            host, server, hostname=host, subdomain="workers", meta={"labels": {"app": "worker"}}))
    client_script = f"""
        import time, urllib.request
        for host in ("worker-0", "worker-1"):
            url = f"http://{{host}}.workers.{namespace}.svc:2222/"
            for attempt in range(100):
                try:
                    print(host, urllib.request.urlopen(url, timeout=2).read().decode()); break
                except OSError as error:
                    time.sleep(0.2)
            else:
                raise SystemExit(f"{{url}} unreachable: {{error}}")
    """
    core.create_namespaced_pod(namespace, _pod("client", client_script))
    pod = _wait_phase(cluster, namespace, "client")
    log = core.read_namespaced_pod_log("client", namespace)
    assert pod.status.phase == "Succeeded", log
    assert "worker-0 worker-0" in log and "worker-1 worker-1" in log
    ips = {core.read_namespaced_pod(h, namespace).status.pod_ip for h in ("worker-0", "worker-1")}
    assert len(ips) == 2


def test_a_failing_job_is_retried_by_the_job_controller_and_fails(cluster, namespace):
    """Exit code 3 ends the pod Failed with that code; the real Job controller makes one more
    pod (backoffLimit 1), then fails the Job."""
    from kubernetes import client

    batch = client.BatchV1Api(cluster.api_client)
    template = _pod("unused", "print('trying'); raise SystemExit(3)")
    batch.create_namespaced_job(namespace, {
        "metadata": {"name": "flaky"},
        "spec": {"backoffLimit": 1, "template": {"spec": template["spec"]}}})
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        job = batch.read_namespaced_job("flaky", namespace)
        conditions = {c.type: c for c in job.status.conditions or []}
        if conditions.get("Failed") and conditions["Failed"].status == "True":
            break
        assert time.monotonic() < deadline, job.status
        time.sleep(0.5)
    assert conditions["Failed"].reason == "BackoffLimitExceeded"
    pods = _core(cluster).list_namespaced_pod(namespace, label_selector="job-name=flaky").items
    assert len(pods) == 2
    for pod in pods:
        [status] = pod.status.container_statuses
        assert (pod.status.phase, status.state.terminated.exit_code) == ("Failed", 3)
        assert "trying" in _core(cluster).read_namespaced_pod_log(pod.metadata.name, namespace)


def test_a_deleted_pod_gets_sigterm_and_its_grace_period(cluster, namespace):
    """Deleting a running pod: SIGTERM reaches the process, which may finish its work within the
    grace period; then the pod is gone. Its claim (the default StorageClass's, provisioned by the
    node) keeps the files."""
    script = """
        import signal, sys, time
        def stop(*_):
            time.sleep(1)  # finishing up, within the grace period
            open("/mnt/data/terminated", "w").write("by SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        open("/mnt/data/started", "w").write("yes")
        while True:
            time.sleep(0.1)
    """
    core = _core(cluster)
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": "shared"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    core.create_namespaced_pod(namespace, _pod(
        "sleeper", script, terminationGracePeriodSeconds=5,
        container={"volumeMounts": [{"name": "data", "mountPath": "/mnt/data"}]},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}]))
    data = cluster.claim_dir(namespace, "shared")
    deadline = time.monotonic() + WAIT_SECONDS
    while not (data / "started").exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    core.delete_namespaced_pod("sleeper", namespace)
    from kubernetes.client.exceptions import ApiException

    while True:
        try:
            core.read_namespaced_pod("sleeper", namespace)
        except ApiException as error:
            assert error.status == 404
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert (data / "terminated").read_text() == "by SIGTERM"


def test_an_image_with_no_local_program_waits_saying_why(cluster, namespace):
    core = _core(cluster)
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "foreign"},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}})
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        pod = core.read_namespaced_pod("foreign", namespace)
        statuses = pod.status.container_statuses or []
        # (Waiting with PodInitializing first, as a kubelet reports a container not yet made.)
        if statuses and statuses[0].state.waiting and \
                statuses[0].state.waiting.reason != "PodInitializing":
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    waiting = statuses[0].state.waiting
    assert waiting.reason == "ErrImagePull"
    assert "no local program for image 'nginx:1.27'" in waiting.message
    assert pod.status.phase == "Pending"
