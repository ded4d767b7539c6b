"""A Kubernetes control plane of the upstream programs on loopback: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, each the real program built from its module
(``build.py``), started with the flags a kubeadm cluster gives them where they matter to us.

What is real, and so judged as a cluster judges it: storage in etcd, every API's validation and
defaulting, the default admission plugins (ServiceAccount, NamespaceLifecycle, LimitRanger,
ResourceQuota, DefaultStorageClass, MutatingAdmissionWebhook, ValidatingAdmissionWebhook, …:
kubernetes v1.34.1 pkg/kubeapiserver/options/plugins.go DefaultOffAdmissionPlugins), RBAC
authorization, ServiceAccount tokens (TokenRequest, signed with a key made at start), CRDs, the
Job, garbage-collector, namespace, ServiceAccount, Deployment and ReplicaSet controllers, and
the scheduler. Identities are bearer tokens from a static token file (kube-apiserver
--token-auth-file): the cluster admin in ``system:masters``, the controller manager and the
scheduler under the user names the default RBAC policy binds their roles to
(plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go, v1.34.1).

What differs from a cluster, and why: the API server advertises 127.0.0.1 and runs no
endpoint reconciler (``--endpoint-reconciler-type=none``), since EndpointSlice validation
refuses loopback addresses for the ``kubernetes`` Service; there is no kubelet (no container
runtime here): a node agent of ours runs pods as processes.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from fmnist_kfp.launcher.local_processes import _die_with_parent  # PR_SET_PDEATHSIG
from localcluster import certs
from localcluster.build import Built, build
from localcluster.pod_network import host_address, reserve_subnet
from localcluster.programs import CONTROL_PLANE, KUBE_PROXY, KUBERNETES_VERSION

SERVICE_CIDR = "10.96.0.0/16"
API_SERVICE_IP = "10.96.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service
ISSUER = "https://kubernetes.default.svc.cluster.local"
START_TIMEOUT_SECONDS = 120


class ControlPlaneFailed(RuntimeError):
    """A program of the control plane did not start; the message names its log."""


@dataclass
class Identity:
    """A user of the static token file."""

    user: str
    groups: tuple[str, ...] = ()
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))


@dataclass
class ControlPlane:
    """The control plane whose files live in ``state_dir``: ``start()``, ``stop()``, and a
    kubeconfig per identity (``kubeconfig("admin")``)."""

    state_dir: Path
    die_with_parent: bool = True  # a test session's cluster ends with it, even on SIGKILL
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    built: Built | None = None
    identities: dict[str, Identity] = field(default_factory=dict)
    subnet: int = 0  # the pods' 10.244.<subnet>.0/24, with a node agent

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / "pki" / "ca.crt"

    def kubeconfig(self, identity: str = "admin") -> Path:
        return self.state_dir / f"{identity}.kubeconfig"

    def start(self, *, node_agent: bool = False, gpus: int = 0,
              programs: dict[str, str] | None = None, log=None) -> ControlPlane:
        """Starts the programs; with ``node_agent``, also the node that runs pods
        (:mod:`localcluster.node_agent`, root only), offering ``gpus`` GPUs and running the
        images named in ``programs`` (:func:`localcluster.operators.programs`)."""
        from fmnist_kfp.launcher.local_processes import free_ports

        self.built = build(CONTROL_PLANE, log=log)
        if node_agent:
            self.subnet = reserve_subnet()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)
        pki = self.state_dir / "pki"
        pki.mkdir(exist_ok=True)
        names = ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler")
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        ca = certs.make_ca(pki)
        # Pods reach the API server at the host's end of its link to the node (the node agent
        # relays it).
        relay = (host_address(self.subnet),) if self.subnet else ()
        serving_cert, serving_key = certs.make_serving_cert(
            pki, "apiserver", ca, certs.API_SERVER_NAMES,
            ("127.0.0.1", API_SERVICE_IP, *relay))
        sa_key, sa_pub = certs.make_service_account_keys(pki)
        # The aggregator's client identity towards aggregated API servers (Kueue's visibility
        # API): they authenticate the API server by this CA, as kubeadm sets it up.
        front_proxy_ca = certs.make_ca(pki, "front-proxy-ca", stem="front-proxy-ca")
        certs.make_client_cert(pki, "front-proxy-client", front_proxy_ca, "front-proxy-client")
        self.identities = {
            "admin": Identity("kubernetes-admin", ("system:masters",)),
            "controller-manager": Identity("system:kube-controller-manager"),
            "scheduler": Identity("system:kube-scheduler"),
        }
        tokens = pki / "tokens.csv"
        tokens.write_text("".join(
            f'{i.token},{i.user},{i.user},"{",".join(i.groups)}"\n'
            for i in self.identities.values()))
        tokens.chmod(0o600)
        for name in self.identities:
            self._write_kubeconfig(name)
        try:
            self._start_etcd()
            self._start_apiserver(serving_cert, serving_key, sa_key, sa_pub, tokens)
            self._start_controller_manager(sa_key)
            self._start_scheduler()
            if node_agent:
                self._start_node_agent(gpus, programs or {})
            self._write_state()
        except BaseException:
            self.stop()
            raise
        return self

    # --- the programs ---------------------------------------------------------------------

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn("etcd", [
            "--name=local", f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}", "--initial-cluster-state=new",
            # A test cluster's data is thrown away: fsync buys nothing but seconds per write.
            "--unsafe-no-fsync", "--log-level=warn"])
        self._wait_until("etcd", lambda: _get(f"{client}/health") is not None)

    def _start_apiserver(self, serving_cert, serving_key, sa_key, sa_pub, tokens) -> None:
        self._spawn("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--tls-cert-file={serving_cert}", f"--tls-private-key-file={serving_key}",
            f"--client-ca-file={self.ca_file}", f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={ISSUER}", f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none", "--allow-privileged=true",
            # Webhooks and aggregated APIs are called at their Services' endpoints (the pods'
            # addresses), not at virtual ClusterIPs: kube-proxy runs in the node's network
            # namespace, not on the host where the API server is.
            "--enable-aggregator-routing=true",
            f"--requestheader-client-ca-file={self.state_dir / 'pki' / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.state_dir / 'pki' / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={self.state_dir / 'pki' / 'front-proxy-client.key'}",
            "--profiling=false", "--v=1"])
        ssl_context = ssl.create_default_context(cafile=str(self.ca_file))
        self._wait_until("kube-apiserver", lambda: _get(
            f"{self.server}/readyz", ssl_context) == b"ok")

    def _components_flags(self, identity: str, port_name: str) -> list[str]:
        kubeconfig = self.kubeconfig(identity)
        return [f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--bind-address=127.0.0.1",
                f"--secure-port={self.ports[port_name]}", "--leader-elect=false",
                "--profiling=false", "--v=1"]

    def _start_controller_manager(self, sa_key: Path) -> None:
        self._spawn("kube-controller-manager", [
            *self._components_flags("controller-manager", "controller-manager"),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={sa_key}", f"--root-ca-file={self.ca_file}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # No cloud, no node IPAM, no CSR signing keys: the controllers that need them are
            # left out rather than left to fail.
            "--controllers=*,-nodeipam,-csrsigning,-cloud-node-lifecycle,-service-lb-controller,"
            "-node-route-controller"])

    def _start_scheduler(self) -> None:
        self._spawn("kube-scheduler", self._components_flags("scheduler", "scheduler"))

    def _start_node_agent(self, gpus: int, programs: dict[str, str]) -> None:
        import sys

        log = open(self.state_dir / "logs" / "node-agent.log", "ab")
        self.processes["node-agent"] = subprocess.Popen(
            [sys.executable, "-m", "localcluster.node_agent",
             f"--kubeconfig={self.kubeconfig('admin')}",
             f"--api-server=127.0.0.1:{self.ports['apiserver']}",
             f"--state-dir={self.state_dir / 'node'}", f"--subnet={self.subnet}",
             f"--gpus={gpus}", f"--kube-proxy={build(KUBE_PROXY).path('kube-proxy')}",
             *(f"--program={k}={v}" for k, v in programs.items())],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent if self.die_with_parent else None,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        log.close()
        self._wait_until("node-agent", self._node_ready)

    def _node_ready(self) -> bool:
        import json as json_

        ssl_context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(
            f"{self.server}/api/v1/nodes/local-node",
            headers={"Authorization": f"Bearer {self.identities['admin'].token}"})
        try:
            with urllib.request.urlopen(request, timeout=2, context=ssl_context) as response:
                node = json_.load(response)
        except OSError:
            return False
        conditions = (node.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # --- processes and files --------------------------------------------------------------

    def _spawn(self, program: str, args: list[str]) -> None:
        assert self.built is not None
        log = open(self.state_dir / "logs" / f"{program}.log", "ab")
        self.processes[program] = subprocess.Popen(
            [str(self.built.path(program)), *args], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_die_with_parent if self.die_with_parent else None)
        log.close()

    def _wait_until(self, program: str, ready, timeout: float = START_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.processes[program]
            if process.poll() is not None:
                raise ControlPlaneFailed(
                    f"{program} exited with code {process.returncode}: see "
                    f"{self.state_dir / 'logs' / (program + '.log')}")
            if ready():
                return
            time.sleep(0.2)
        raise ControlPlaneFailed(f"{program} not ready after {timeout:.0f} s: see "
                                 f"{self.state_dir / 'logs' / (program + '.log')}")

    def _write_kubeconfig(self, identity: str) -> None:
        # kubectl's format, which both client-go and the Python client read.
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "local",
            "clusters": [{"name": "local", "cluster": {
                "server": f"https://127.0.0.1:{self.ports['apiserver']}",
                "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": identity,
                       "user": {"token": self.identities[identity].token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": identity,
                                                       "namespace": "default"}}],
        }
        path = self.kubeconfig(identity)
        path.write_text(json.dumps(config, indent=1))  # JSON is YAML
        path.chmod(0o600)

    def _write_state(self) -> None:
        (self.state_dir / "state.json").write_text(json.dumps({
            "kubernetes": KUBERNETES_VERSION, "server": self.server,
            "kubeconfig": str(self.kubeconfig("admin")),
            "pids": {name: p.pid for name, p in self.processes.items()}}, indent=1))

    def stop(self, grace_seconds: float = 10) -> None:
        """Stops every program, the last started first."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(grace_seconds)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.processes.clear()


def stop_recorded(state_dir: Path, grace_seconds: float = 10) -> list[str]:
    """Stops the programs a detached ``up`` recorded in ``state_dir``; their names."""
    state = state_dir / "state.json"
    if not state.exists():
        return []
    pids = json.loads(state.read_text())["pids"]
    stopped = []
    for name, pid in reversed(list(pids.items())):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + grace_seconds
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        stopped.append(name)
    state.unlink()
    return stopped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _get(url: str, context: ssl.SSLContext | None = None) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return response.read()
    except OSError:
        return None

