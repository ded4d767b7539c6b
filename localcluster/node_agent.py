"""The node agent: a kubelet for a machine without a container runtime. It registers one Node,
keeps it Ready, and runs the containers of the pods bound to it as local processes, each pod in
a network namespace of its own. It is the one part of the local cluster that is ours; every
rule below follows the kubelet of Kubernetes v1.34.1 where it cites it.

* **Node.** Capacity: this machine's CPUs and memory, ``pods: 110``, and ``nvidia.com/gpu`` as
  configured (GPU pods then schedule, and run on the CPU). Ready, with its status and its Lease
  in ``kube-node-lease`` renewed every 10 s, as the node lifecycle controller expects
  (pkg/kubelet/nodelease, pkg/controller/nodelifecycle: NotReady after 50 s of silence).
* **Images.** The project's image (any reference whose repository ends in ``fmnist-kfp``, tag
  and ``-gpu`` alike) runs in this Python environment: its ``bin`` first on the PATH, so
  ``python`` and ``fmnist-kfp`` are the checkout's. An upstream operator's image runs as the
  program built from its module (``--program training-operator=<path>``: its command's first
  word, the image's entrypoint, becomes the program), with a /tmp of its own. Any other image
  has no local program: the container waits with reason ``ErrImagePull`` and a message saying
  so, as a kubelet does for an image it cannot pull.
* **Readiness** by the container's readinessProbe (HTTP GET or TCP at the pod's address), so
  Services' endpoints, and the webhooks the API server calls at them, follow it.
* **Network.** The node's own network namespace with a bridge with a /24 of 10.244.0.0/16
  per cluster, routed to and from the host; each pod a network namespace
  with a veth on the bridge and its own address (``status.podIP``). Names resolve through a
  hosts file per pod (``/etc/netns/<ns>/hosts``, which ``ip netns exec`` mounts over
  ``/etc/hosts``): the pod's own, ``<hostname>.<subdomain>.<namespace>.svc`` of every pod that
  sets both, a headless Service's names to a ready pod's address, and every other Service's
  names to its cluster IP, which the real kube-proxy (nftables mode, in the node's network
  namespace: :mod:`localcluster.pod_network`) translates to a ready endpoint, port for port.
  No DNS server: names outside this file do not resolve, at once (the pod's resolv.conf names
  no nameserver). The API server is reached at
  ``KUBERNETES_SERVICE_HOST``, the host's end of its link to the node, port 443, relayed to
  the API server on loopback.
* **Processes.** Each container's processes are host processes; a pod that sets
  ``shareProcessNamespace`` gets a PID namespace of its own, whose pid 1 reaps orphans as the
  pause container does, with each container's process at parent pid 0 and a /proc of its own.
* **Containers.** Init containers one after another, each to success, then the others together
  (pkg/kubelet/kuberuntime/kuberuntime_manager.go computePodActions). Env from values, the
  downward API, ConfigMaps and Secrets (``env`` and ``envFrom``; kubelet_pods.go
  makeEnvironmentVariables), ``$(VAR)`` expanded in env values, commands and args;
  volumes as directories: emptyDir, PersistentVolumeClaim (one
  directory per claim, shared by every pod that mounts it: ReadWriteMany), ConfigMap, Secret,
  and projected ServiceAccount tokens (TokenRequest, as the kubelet's token manager asks), each
  bind-mounted at its mount path inside the container's own mount namespace
  (:mod:`localcluster.pod_exec`). Restarts follow ``restartPolicy`` with the kubelet's
  back-off, 10 s doubling to 300 s (pkg/kubelet/kubelet.go 216, container/helpers.go 82-121).
* **Status** as the kubelet reports it: phase (kubelet_pods.go getPhase), the pod conditions,
  init and container statuses with exit codes, reasons (``Completed``, ``Error``,
  ``ContainerCannotRun``) and restart counts, ``podIP`` and ``hostIP``.
* **Termination.** A pod being deleted gets SIGTERM, then SIGKILL after its grace period,
  at least 2 s even when force-deleted (kuberuntime_container.go killContainer,
  minimumGracePeriodInSeconds); once its containers have stopped the agent deletes
  it with grace 0 and its UID as precondition (pkg/kubelet/status/status_manager.go 1095-1150).
* **Storage.** A default StorageClass ``local``; each of its claims gets a PersistentVolume,
  a directory of this node that every pod mounting the claim shares (all pods run here, so
  ReadWriteMany holds).
* **Logs** through the API's ``pods/log``: the API server asks the node's
  ``/containerLogs/<namespace>/<pod>/<container>`` (pkg/kubelet/server/server.go 568), which
  this agent serves over TLS on loopback (``follow``, ``tailLines``, ``previous``,
  ``limitBytes``).

It needs root (network namespaces, bind mounts) and iproute2.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import traceback
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from fmnist_kfp.launcher.local_processes import _die_with_parent  # PR_SET_PDEATHSIG
from localcluster.pod_network import PodNetwork, _Relay
from localcluster.pod_runner import NODE_NAME, PodRunner, _memory_bytes, now

POLL_SECONDS = 0.5
LEASE_SECONDS = 10
STORAGE_CLASS = "local"
PROVISIONER = "fmnist.kubeflow.org/node-agent"



def _resolv_conf(namespace: str) -> str:
    """A pod's resolv.conf as the kubelet writes it for ``dnsPolicy: ClusterFirst``
    (pkg/kubelet/network/dns/dns.go: the cluster's search path, ``ndots:5``), with no
    nameserver, as there is no cluster DNS server here: resolvers then ask the pod's own
    loopback, which refuses at once. The host's resolv.conf would name a server the pod cannot
    reach, and every lookup that misses the hosts file would wait out its timeouts: 10 s per
    gRPC connection of a Go program (grpc-go's dns resolver looks up a service-config TXT
    record), which is what each of Katib's calls to its suggestion service took."""
    return (f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
            "options ndots:5\n")


def _selects(selector: dict[str, str], pod: dict) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


# --- the API, as the agent uses it --------------------------------------------------------


class AgentApi:
    """The few API calls the agent makes, through the Python client."""

    def __init__(self, kubeconfig: str):
        from kubernetes import client, config

        self.client = config.new_client_from_config(kubeconfig)
        self.core = client.CoreV1Api(self.client)
        self.coordination = client.CoordinationV1Api(self.client)

    def call(self, path: str, method: str, body=None, content_type="application/json"):
        return self.client.call_api(path, method, body=body, response_type="object",
                                    header_params={"Content-Type": content_type},
                                    auth_settings=["BearerToken"],
                                    _return_http_data_only=True)

    def patch_pod_status(self, namespace: str, name: str, status: dict) -> None:
        from kubernetes.client.exceptions import ApiException

        status = {k: v for k, v in status.items() if v is not None}
        try:
            self.call(f"/api/v1/namespaces/{namespace}/pods/{name}/status", "PATCH",
                      {"status": status}, "application/merge-patch+json")
        except ApiException as error:
            if error.status != 404:
                raise

    def config_map_data(self, namespace: str, ref: dict) -> dict[str, str] | None:
        return self._read("configmaps", namespace, ref, decode=False)

    def secret_data(self, namespace: str, ref: dict) -> dict[str, str] | None:
        return self._read("secrets", namespace, ref, decode=True)

    def _read(self, plural: str, namespace: str, ref: dict, decode: bool):
        from kubernetes.client.exceptions import ApiException

        try:
            obj = self.call(f"/api/v1/namespaces/{namespace}/{plural}/{ref['name']}", "GET")
        except ApiException as error:
            if error.status == 404 and ref.get("optional"):
                return None
            raise
        data = dict(obj.get("data") or {})
        if decode:
            return {k: base64.b64decode(v).decode() for k, v in data.items()}
        return {**data, **{k: base64.b64decode(v).decode()
                           for k, v in (obj.get("binaryData") or {}).items()}}

    def token(self, namespace: str, account: str, pod_meta: dict, audience: str | None,
              seconds: int) -> str:
        """A token bound to the pod, as the kubelet's token manager requests it."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [audience] if audience else None,
                         "expirationSeconds": max(seconds, 600),
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                                            "name": pod_meta["name"], "uid": pod_meta["uid"]}}}
        body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
        answer = self.call(f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                           "POST", body)
        return answer["status"]["token"]


# --- the agent ------------------------------------------------------------------------------


class NodeAgent:
    """Registers the node and runs the pods bound to it until :meth:`stop`."""

    def __init__(self, kubeconfig: str, api_server: tuple[str, int], state_dir: Path,
                 subnet: int, gpus: int = 0, programs: dict[str, str] | None = None,
                 kube_proxy: str | None = None):
        self.api = AgentApi(kubeconfig)
        self.kubeconfig = kubeconfig
        self.kube_proxy = kube_proxy  # the program, run in the node's network namespace
        self.kube_proxy_process: subprocess.Popen | None = None
        self.programs = programs or {}  # image repository name -> program
        self.state_dir = state_dir
        self.gpus = gpus
        self.network = PodNetwork(subnet)
        self.api_server = api_server
        self.runners: dict[str, PodRunner] = {}
        self.hosts_lock = threading.Lock()
        self.made_on_host: set[str] = set()  # see _remove_made_on_host
        self.stopping = threading.Event()
        self.log_port = 0

    def claim_dir(self, namespace: str, claim: str) -> Path:
        path = self.state_dir / "volumes" / namespace / claim
        path.mkdir(parents=True, exist_ok=True)
        return path

    def run(self) -> None:
        self.network.up()
        relay = _Relay((self.network.host_address, 443), self.api_server)
        threading.Thread(target=relay.serve_forever, daemon=True).start()
        self.log_port = self._serve_logs()
        self._register()
        self._storage_class()
        self._start_kube_proxy()
        threading.Thread(target=self._heartbeat, daemon=True).start()
        try:
            while not self.stopping.is_set():
                try:
                    self._sync()
                except Exception:  # as the kubelet's sync loop: log it, try again next round
                    traceback.print_exc(file=sys.stderr)
                    sys.stderr.flush()
                self.stopping.wait(POLL_SECONDS)
        finally:
            self._collect_made_on_host()  # while the pods' folders are still there
            for runner in self.runners.values():
                runner.gone.set()
                runner.deleting.set()
            deadline = time.monotonic() + 5  # within the control plane's grace for the agent
            for runner in self.runners.values():
                runner.join(timeout=max(0.0, deadline - time.monotonic()))
            self._remove_made_on_host()
            if self.kube_proxy_process is not None:
                self.kube_proxy_process.terminate()
                try:
                    self.kube_proxy_process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.kube_proxy_process.kill()
            relay.shutdown()
            self.network.down()

    def _start_kube_proxy(self) -> None:
        """kube-proxy in nftables mode, in the node's network namespace (where the pods'
        traffic is routed), reaching the API server through the relay: Services' cluster IPs
        and ports are translated to their ready endpoints as on any node."""
        if not self.kube_proxy:
            return
        import yaml

        config = yaml.safe_load(Path(self.kubeconfig).read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://{self.network.host_address}:443"
        kubeconfig = self.state_dir / "kube-proxy.kubeconfig"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        kubeconfig.write_text(yaml.safe_dump(config))
        kubeconfig.chmod(0o600)
        log = open(self.state_dir / "kube-proxy.log", "ab")
        self.kube_proxy_process = subprocess.Popen(
            ["ip", "netns", "exec", self.network.netns, self.kube_proxy,
             f"--kubeconfig={kubeconfig}", f"--hostname-override={NODE_NAME}",
             "--proxy-mode=nftables", f"--cluster-cidr={self.network.cidr}",
             # Leaves the host's conntrack table size alone (the node shares its kernel).
             "--conntrack-max-per-core=0"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,  # nft is in /usr/sbin, off some PATHs
            env={**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"})
        log.close()

    def _collect_made_on_host(self) -> None:
        for record in (self.state_dir / "pods").glob("*/rootfs/*/made-on-host"):
            self.made_on_host.update(record.read_text().splitlines())

    def _remove_made_on_host(self) -> None:
        """Mount paths directly under / that containers needed (pod_exec.Paths), if empty."""
        self._collect_made_on_host()
        for line in sorted(self.made_on_host):
            path = Path(line)
            try:
                if path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
                elif path.is_file() and path.stat().st_size == 0:
                    path.unlink()
            except OSError:
                pass

    def stop(self, *_args) -> None:
        self.stopping.set()

    def _sync(self) -> None:
        pods = self.api.call(f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE_NAME}",
                             "GET")["items"]
        seen = set()
        for pod in pods:
            uid = pod["metadata"]["uid"]
            seen.add(uid)
            runner = self.runners.get(uid)
            if runner is None:
                if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    continue  # an earlier agent's: nothing left to run
                runner = self.runners[uid] = PodRunner(self, pod)
                runner.start()
            elif pod["metadata"].get("deletionTimestamp"):
                runner.pod = pod
                runner.deleting.set()
        for uid in list(self.runners):
            if uid not in seen:
                runner = self.runners.pop(uid)
                runner.gone.set()
                runner.deleting.set()
            elif self.runners[uid].finished and self.runners[uid].deleting.is_set():
                self.runners.pop(uid)
        self._provision()
        self.write_hosts()

    def _storage_class(self) -> None:
        """The default StorageClass, whose claims this node provisions (see _provision)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.call("/apis/storage.k8s.io/v1/storageclasses", "POST", {
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS, "annotations": {
                    "storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": PROVISIONER, "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate"})
        except ApiException as error:
            if error.status != 409:
                raise

    def _provision(self) -> None:
        """A PersistentVolume for each pending claim of the default StorageClass: a directory
        of this node (every access mode, ReadWriteMany included: all pods run here), bound to
        the claim by its claimRef, which the controller manager's PV controller completes, as
        an external provisioner does (sig-storage-lib-external-provisioner)."""
        from kubernetes.client.exceptions import ApiException

        claims = self.api.call("/api/v1/persistentvolumeclaims", "GET")["items"]
        for claim in claims:
            spec, meta = claim["spec"], claim["metadata"]
            if spec.get("storageClassName") != STORAGE_CLASS or spec.get("volumeName") or \
                    (claim.get("status") or {}).get("phase") != "Pending":
                continue
            path = self.claim_dir(meta["namespace"], meta["name"])
            size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
            try:
                self.api.call("/api/v1/persistentvolumes", "POST", {
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": f"pvc-{meta['uid']}",
                                 "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
                    "spec": {"capacity": {"storage": size},
                             "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                             "persistentVolumeReclaimPolicy": "Delete",
                             "storageClassName": STORAGE_CLASS,
                             "hostPath": {"path": str(path)},
                             "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                          "namespace": meta["namespace"],
                                          "name": meta["name"], "uid": meta["uid"]}}})
            except ApiException as error:
                if error.status != 409:
                    raise

    def write_resolv_conf(self, runner: PodRunner) -> None:
        """A new pod's resolv.conf, once, before its first container starts (as the hosts
        file, `ip netns exec` mounts it only if it exists when the process starts)."""
        folder = Path("/etc/netns") / runner.netns
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "resolv.conf").write_text(_resolv_conf(runner.namespace))

    def write_hosts(self) -> None:
        """Each running pod's hosts file: every pod's own names and its Services' (see the
        module docstring)."""
        with self.hosts_lock:
            self._write_hosts()

    def _write_hosts(self) -> None:
        services = self.api.call("/api/v1/services", "GET")["items"]
        runners = [r for r in list(self.runners.values()) if r.address and not r.finished]
        names: dict[str, str] = {}
        for runner in runners:
            spec, ns = runner.pod["spec"], runner.namespace
            if spec.get("subdomain"):
                for suffix in ("", ".svc", ".svc.cluster.local"):
                    names[f"{runner.hostname}.{spec['subdomain']}.{ns}{suffix}"] = runner.address
        for service in services:
            spec = service.get("spec") or {}
            selector = spec.get("selector")
            if not selector:
                continue
            ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
            address = spec.get("clusterIP")
            if address in ("None", None):  # headless: a ready pod's own address
                ready_only = not spec.get("publishNotReadyAddresses")
                address = next((r.address for r in sorted(runners, key=lambda r: r.name)
                                if r.namespace == ns and _selects(selector, r.pod)
                                and (not ready_only or r.phase() == "Running")), None)
                if address is None:
                    continue
            for suffix in ("", ".svc", ".svc.cluster.local"):
                names.setdefault(f"{name}.{ns}{suffix}", address)
        for runner in runners:
            lines = ["127.0.0.1 localhost", f"{runner.address} {runner.hostname}"]
            lines += [f"{address} {name}" for name, address in sorted(names.items())]
            # The names a pod's DNS search path (<namespace>.svc.cluster.local first) completes:
            # `workers` and `worker-0.workers` of its own namespace.
            own = f".{runner.namespace}"
            short = [f"{address} {name[:-len(own)]}" for name, address in names.items()
                     if name.endswith(own)]
            text = "\n".join(lines + short) + "\n"
            folder = Path("/etc/netns") / runner.netns
            folder.mkdir(parents=True, exist_ok=True)
            hosts = folder / "hosts"
            if not hosts.exists() or hosts.read_text() != text:
                partial = folder / "hosts.partial"
                partial.write_text(text)
                # In place, not renamed: a running pod's /etc/hosts is a bind mount of this
                # very file, which a rename would leave behind.
                with open(hosts, "a+") as handle:
                    handle.seek(0)
                    handle.truncate()
                    handle.write(text)
                partial.unlink()

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.call(f"/api/v1/namespaces/{namespace}/pods/{name}", "DELETE",
                          {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        except ApiException as error:
            if error.status not in (404, 409):
                raise

    # --- the Node -------------------------------------------------------------------------

    def _node_status(self) -> dict:
        capacity = {"cpu": str(os.cpu_count()), "memory": f"{_memory_bytes() // 1024}Ki",
                    "pods": "110", "ephemeral-storage": "100Gi"}
        if self.gpus:
            capacity["nvidia.com/gpu"] = str(self.gpus)
        moment = now()
        conditions = [{"type": kind, "status": "False", "reason": f"KubeletHas{reason}",
                       "lastHeartbeatTime": moment, "lastTransitionTime": moment}
                      for kind, reason in (("MemoryPressure", "SufficientMemory"),
                                           ("DiskPressure", "NoDiskPressure"),
                                           ("PIDPressure", "SufficientPID"))]
        conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                           "message": "node agent (pods as local processes) is ready",
                           "lastHeartbeatTime": moment, "lastTransitionTime": moment})
        uname = os.uname()
        return {"capacity": capacity, "allocatable": capacity, "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": self.log_port}},
                "nodeInfo": {"machineID": "local", "systemUUID": "local", "bootID": "local",
                             "kernelVersion": uname.release, "osImage": "local processes",
                             "containerRuntimeVersion": "process://fmnist-kfp-node-agent",
                             "kubeletVersion": "v1.34.1", "kubeProxyVersion": "",
                             "operatingSystem": "linux", "architecture": "amd64"}}

    def _register(self) -> None:
        from kubernetes.client.exceptions import ApiException

        node = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME,
                                          "kubernetes.io/os": "linux",
                                          "kubernetes.io/arch": "amd64"}}}
        try:
            self.api.call("/api/v1/nodes", "POST", node)
        except ApiException as error:
            if error.status != 409:
                raise
        self._patch_node()

    def _patch_node(self) -> None:
        self.api.call(f"/api/v1/nodes/{NODE_NAME}/status", "PATCH",
                      {"status": self._node_status()}, "application/merge-patch+json")

    def _heartbeat(self) -> None:
        from kubernetes.client.exceptions import ApiException

        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE_NAME}"
        while not self.stopping.is_set():
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": NODE_NAME, "namespace": "kube-node-lease"},
                     "spec": {"holderIdentity": NODE_NAME, "leaseDurationSeconds": 40,
                              "renewTime": stamp}}
            try:
                try:
                    self.api.call(path, "PATCH", {"spec": lease["spec"]},
                                  "application/merge-patch+json")
                except ApiException as error:
                    if error.status != 404:
                        raise
                    self.api.call(path.rsplit("/", 1)[0], "POST", lease)
                self._patch_node()
            except Exception as error:  # the next beat tries again
                print(f"heartbeat: {error}", file=sys.stderr, flush=True)
            self.stopping.wait(LEASE_SECONDS)

    # --- logs -----------------------------------------------------------------------------

    def _serve_logs(self) -> int:
        from localcluster import certs

        pki = self.state_dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = certs.make_ca(pki, "fmnist-kfp-node-agent")
        cert, key = certs.make_serving_cert(pki, "node-agent", ca, ("localhost",),
                                            ("127.0.0.1",))
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                pieces = parts.path.strip("/").split("/")
                if len(pieces) != 4 or pieces[0] != "containerLogs":
                    self.send_error(404)
                    return
                _, namespace, pod, container = pieces
                agent._send_log(self, namespace, pod, container, parse_qs(parts.query))

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server.server_address[1]

    def _send_log(self, handler, namespace: str, pod: str, container: str, query) -> None:
        runner = next((r for r in self.runners.values()
                       if r.namespace == namespace and r.name == pod), None)
        run = runner and next((c for c in runner.inits + runner.mains if c.name == container),
                              None)
        if run is None:
            handler.send_error(404, f"container {container} of pod {namespace}/{pod} "
                                    "is not on this node")
            return
        attempt = run.restarts - 1 if query.get("previous", ["false"])[0] == "true" \
            else run.restarts
        path = runner.dir / "logs" / container / f"{attempt}.log"
        if not path.exists():
            handler.send_error(400, f"container {container} has no log yet")
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.end_headers()
        data = path.read_bytes()
        if "tailLines" in query:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(query["tailLines"][0]):]) if int(
                query["tailLines"][0]) else b""
        if "limitBytes" in query:
            data = data[:int(query["limitBytes"][0])]
        handler.wfile.write(data)
        if query.get("follow", ["false"])[0] == "true":
            offset = path.stat().st_size
            while run.process is not None and run.process.poll() is None:
                time.sleep(0.2)
                size = path.stat().st_size
                if size > offset:
                    with open(path, "rb") as handle:
                        handle.seek(offset)
                        handler.wfile.write(handle.read(size - offset))
                    handler.wfile.flush()
                    offset = size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m localcluster.node_agent")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--api-server", required=True, help="host:port of the API server")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--subnet", type=int, required=True,
                        help="the pods' /24 is 10.244.<subnet>.0 (see reserve_subnet)")
    parser.add_argument("--gpus", type=int, default=0,
                        help="nvidia.com/gpu the node offers (the pods run on the CPU)")
    parser.add_argument("--program", action="append", default=[], metavar="REPOSITORY=PATH",
                        help="run images of this repository name as this program")
    parser.add_argument("--kube-proxy", metavar="PATH",
                        help="kube-proxy, run in the node's network namespace")
    args = parser.parse_args(argv)
    host, port = args.api_server.rsplit(":", 1)
    programs = dict(item.split("=", 1) for item in args.program)
    agent = NodeAgent(args.kubeconfig, (host, int(port)), args.state_dir, args.subnet,
                      args.gpus, programs, args.kube_proxy)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    agent.run()


if __name__ == "__main__":
    main()
