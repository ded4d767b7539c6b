"""The node agent (localcluster/node_agent.py) under the real control plane: pods created
through the API, scheduled by the real kube-scheduler, run as processes in network namespaces
of their own, their Jobs judged by the real Job controller, their logs read through the API."""

from __future__ import annotations

import re
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


# Prepended to a client pod's script: a server pod may still be starting, or not yet ready.
FETCH_UNTIL_UP = """
        import time, urllib.request
        def fetch(url, attempts):
            for attempt in range(attempts):
                try:
                    return urllib.request.urlopen(url, timeout=2).read().decode()
                except OSError as error:
                    failure = error
                    time.sleep(0.2)
            raise SystemExit(f"{url} unreachable: {failure}")
"""


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
        print("kept", os.environ["KEPT"])
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
           {"name": "PLAIN", "value": "$(POD)-plain"},
           {"name": "KEPT", "value": "$$(POD) $(UNDEFINED)"}]
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
    assert "kept $(POD) $(UNDEFINED)" in log  # $$ escapes, an unknown name stays
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
    client_script = FETCH_UNTIL_UP + f"""
        for host in ("worker-0", "worker-1"):
            print(host, fetch(f"http://{{host}}.workers.{namespace}.svc:2222/", attempts=100))
    """
    core.create_namespaced_pod(namespace, _pod("client", client_script))
    pod = _wait_phase(cluster, namespace, "client")
    log = core.read_namespaced_pod_log("client", namespace)
    assert pod.status.phase == "Succeeded", log
    assert "worker-0 worker-0" in log and "worker-1 worker-1" in log
    ips = {core.read_namespaced_pod(h, namespace).status.pod_ip for h in ("worker-0", "worker-1")}
    assert len(ips) == 2


def test_a_clusterip_service_is_reached_by_name_through_kube_proxy(cluster, namespace):
    """A ClusterIP Service resolves to its cluster IP, and the real kube-proxy (nftables mode,
    in the node's network namespace) carries a connection to it on to a ready pod: a named
    target port (Katib's db-manager) and port 80 mapped to 8080 (KServe's predictor Service)
    alike, with the answer coming back from the cluster IP; a Service whose pods are not ready
    has no endpoint, so its connections are refused rather than reach a pod."""
    core = _core(cluster)
    server = """
        import http.server, socket
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers()
                self.wfile.write(socket.gethostname().encode())
        http.server.HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
    """
    core.create_namespaced_pod(namespace, _pod(
        "predictor", server, meta={"labels": {"app": "predictor"}},
        container={"ports": [{"name": "http", "containerPort": 8080}],
                   "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}))
    core.create_namespaced_pod(namespace, _pod(
        "unready", server, meta={"labels": {"app": "unready"}},
        container={"readinessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1}}))
    for name, selector, port, target in (("named", "predictor", 6789, "http"),
                                         ("predictor", "predictor", 80, 8080),
                                         ("unready", "unready", 80, 8080)):
        core.create_namespaced_service(namespace, {
            "metadata": {"name": name},
            "spec": {"selector": {"app": selector},
                     "ports": [{"port": port, "targetPort": target}]}})
    cluster_ips = {name: core.read_namespaced_service(name, namespace).spec.cluster_ip
                   for name in ("named", "predictor", "unready")}
    client_script = FETCH_UNTIL_UP + f"""
        import socket
        print("resolved", socket.gethostbyname("predictor.{namespace}.svc.cluster.local"))
        for url in ("http://named.{namespace}:6789/", "http://predictor/",
                    "http://predictor.{namespace}.svc:80/"):
            print(url, fetch(url, attempts=150))
        try:
            urllib.request.urlopen("http://unready/", timeout=5)
            print("unready answered")
        except OSError as error:
            print("unready refused:", error)
        started = time.monotonic()
        try:
            socket.getaddrinfo("no-such-service", 80)
        except OSError:
            print(f"unknown name failed in {{time.monotonic() - started:.1f}} s")
        print(open("/etc/resolv.conf").read())
    """
    core.create_namespaced_pod(namespace, _pod("client", client_script))
    pod = _wait_phase(cluster, namespace, "client")
    log = core.read_namespaced_pod_log("client", namespace)
    assert pod.status.phase == "Succeeded", log
    assert f"resolved {cluster_ips['predictor']}" in log
    for url in (f"http://named.{namespace}:6789/", "http://predictor/",
                f"http://predictor.{namespace}.svc:80/"):
        assert f"{url} predictor" in log, log
    assert "unready refused" in log, log
    # The kubelet's search path; no nameserver (none here), so that a name missing from the
    # hosts file fails at once instead of after the resolver's timeouts (5 s a try).
    assert f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local" in log
    assert "nameserver" not in log
    failed = float(re.search(r"unknown name failed in ([\d.]+) s", log).group(1))
    assert failed < 3, log


def test_a_pod_sharing_its_process_namespace_shows_its_containers_as_katib_reads_them(
        cluster, namespace):
    """``shareProcessNamespace``: a sidecar sees the other container's process at parent pid 0
    beside its own and pid 1 (the pause process), in a /proc of the pod's own, and finds the
    completion marker the main container's shell wrote under its own pid, as Katib's metrics
    collector does (kubeflow/katib v0.19.0 pkg/metricscollector/v1beta1/common/pns.go 56-110;
    the wrapper's ``$$$$.pid`` is pkg/webhook/v1beta1/pod/utils.go 218-222, which the kubelet's
    expansion turns into the shell's ``$$``). Deleting the pod then ends the sidecar, which
    SIGTERM reaches, within its grace period."""
    core = _core(cluster)
    main = {"name": "main", "image": IMAGE, "command": ["sh", "-c"],
            "args": ["sleep 3 1>/var/log/katib/metrics.log 2>&1 && "
                     "echo completed > /var/log/katib/$$$$.pid"],
            "volumeMounts": [{"name": "logs", "mountPath": "/var/log/katib"}]}
    sidecar = {"name": "collector", "image": IMAGE, "command": ["python", "-c", textwrap.dedent("""
        import os, signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: (print("terminated", flush=True), sys.exit(0)))
        def ppid(pid):
            return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        time.sleep(1)
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        roots = [p for p in pids if ppid(p) == 0 and p not in (1, os.getpid())]
        print("pids", len(pids), "me", os.getpid(), "ppid", ppid(os.getpid()), flush=True)
        [main] = roots
        print("main", open(f"/proc/{main}/cmdline").read().replace(chr(0), " "), flush=True)
        while os.path.exists(f"/proc/{main}"):
            time.sleep(0.1)
        print("marker", open(f"/var/log/katib/{main}.pid").read().strip(), flush=True)
        while True:
            time.sleep(0.1)
    """)], "volumeMounts": [{"name": "logs", "mountPath": "/var/log/katib"}]}
    core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trial"},
        "spec": {"restartPolicy": "Never", "shareProcessNamespace": True,
                 "terminationGracePeriodSeconds": 5, "containers": [main, sidecar],
                 "volumes": [{"name": "logs", "emptyDir": {}}]}})
    deadline = time.monotonic() + WAIT_SECONDS
    while "marker" not in (log := _log_or_empty(core, namespace, "trial", "collector")):
        assert "Traceback" not in log, log
        assert time.monotonic() < deadline, log
        time.sleep(0.3)
    assert "ppid 0" in log
    assert "main sh -c sleep 3" in log and "$$.pid" in log
    assert "marker completed" in log
    pids = int(log.split("pids ")[1].split()[0])
    assert pids < 10  # the pod's processes alone, not the host's
    core.delete_namespaced_pod("trial", namespace)
    from kubernetes.client.exceptions import ApiException

    while True:
        try:
            pod = core.read_namespaced_pod("trial", namespace)
        except ApiException as error:
            assert error.status == 404
            break
        for status in pod.status.container_statuses or []:
            if status.name == "collector" and status.state.terminated:
                assert status.state.terminated.exit_code == 0
        assert time.monotonic() < deadline
        time.sleep(0.2)


def _log_or_empty(core, namespace: str, pod: str, container: str) -> str:
    from kubernetes.client.exceptions import ApiException

    try:
        return core.read_namespaced_pod_log(pod, namespace, container=container)
    except ApiException:
        return ""


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
