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
* **Network.** A bridge with a /24 of 10.244.0.0/16 per cluster; each pod a network namespace
  with a veth on the bridge and its own address (``status.podIP``). Names resolve through a
  hosts file per pod (``/etc/netns/<ns>/hosts``, which ``ip netns exec`` mounts over
  ``/etc/hosts``): the pod's own, ``<hostname>.<subdomain>.<namespace>.svc`` of every pod that
  sets both, and each headless Service's names to its pods' addresses. No DNS server and no
  kube-proxy: a ClusterIP Service's virtual address does not route. The API server is reached at
  ``KUBERNETES_SERVICE_HOST``, the bridge's address, port 443, relayed to the API server on
  loopback.
* **Containers.** Init containers one after another, each to success, then the others together
  (pkg/kubelet/kuberuntime/kuberuntime_manager.go computePodActions). Env from values, the
  downward API, ConfigMaps and Secrets (``env`` and ``envFrom``; kubelet_pods.go
  makeEnvironmentVariables); volumes as directories: emptyDir, PersistentVolumeClaim (one
  directory per claim, shared by every pod that mounts it: ReadWriteMany), ConfigMap, Secret,
  and projected ServiceAccount tokens (TokenRequest, as the kubelet's token manager asks), each
  bind-mounted at its mount path inside the container's own mount namespace
  (:mod:`localcluster.pod_exec`). Restarts follow ``restartPolicy`` with the kubelet's
  back-off, 10 s doubling to 300 s (pkg/kubelet/kubelet.go 216, container/helpers.go 82-121).
* **Status** as the kubelet reports it: phase (kubelet_pods.go getPhase), the pod conditions,
  init and container statuses with exit codes, reasons (``Completed``, ``Error``,
  ``ContainerCannotRun``) and restart counts, ``podIP`` and ``hostIP``.
* **Termination.** A pod being deleted gets SIGTERM, then SIGKILL after its grace period
  (kuberuntime_container.go killContainer); once its containers have stopped the agent deletes
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
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseRequestHandler, TCPServer, ThreadingMixIn
from urllib.parse import parse_qs, urlsplit

NODE_NAME = "local-node"
POLL_SECONDS = 0.5
LEASE_SECONDS = 10
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # pkg/kubelet/kubelet.go 216, MaxContainerBackOff
PROJECT_REPOSITORY = "fmnist-kfp"
STORAGE_CLASS = "local"
PROVISIONER = "fmnist.kubeflow.org/node-agent"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def repository_name(image: str) -> str:
    """The last part of ``image``'s repository: ``fmnist-kfp`` of
    ``ghcr.io/fmnist-kfp/fmnist-kfp:0.2.0-gpu``."""
    reference = image.split("@", 1)[0]
    return reference.rsplit("/", 1)[-1].split(":", 1)[0]


def is_project_image(image: str) -> bool:
    """Whether ``image`` is the project's: its repository's last part is ``fmnist-kfp``."""
    return repository_name(image) == PROJECT_REPOSITORY


# --- the pod network ----------------------------------------------------------------------


@dataclass
class PodNetwork:
    """A bridge on the host and a /24 of 10.244.0.0/16 for the pods of one cluster."""

    subnet: int  # the third octet
    bridge: str = ""
    next_host: int = 2
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        self.bridge = f"fk{self.subnet}br"

    @property
    def gateway(self) -> str:
        return f"10.244.{self.subnet}.1"

    def up(self) -> None:
        self.down()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def down(self) -> None:
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def add_pod(self, name: str) -> str:
        """A network namespace ``name`` on the bridge; its address."""
        with self.lock:
            host = self.next_host
            self.next_host += 1
        if host > 254:
            raise RuntimeError("the pod network's /24 is full")
        address = f"10.244.{self.subnet}.{host}"
        self.remove_pod(name)
        veth = f"fk{self.subnet}v{host}"
        _ip("netns", "add", name)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", name, "link", "set", "eth0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", name, "route", "add", "default", "via", self.gateway)
        return address

    def remove_pod(self, name: str) -> None:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def reserve_subnet() -> int:
    """A /24 of 10.244.0.0/16 whose bridge no cluster on this machine has, reserved for 10
    minutes against every other caller (two test runs at once never share one), as the free
    ports are (fmnist_kfp.launcher.local_processes.free_ports)."""
    import fcntl
    import random
    import tempfile

    directory = Path(tempfile.gettempdir()) / f"fmnist-kfp-subnets-{os.getuid()}"
    directory.mkdir(exist_ok=True)
    with open(directory / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = random.SystemRandom().randrange(1, 251)
        for offset in range(250):
            subnet = (start + offset) % 250 + 1
            reservation = directory / str(subnet)
            if reservation.exists() and time.time() - reservation.stat().st_mtime < 600:
                continue
            if Path(f"/sys/class/net/fk{subnet}br").exists():
                continue
            reservation.touch()
            return subnet
    raise RuntimeError("no free /24 left in 10.244.0.0/16 for the pod network")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


class _Relay(ThreadingMixIn, TCPServer):
    """Bytes both ways between a pod and the API server on loopback."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]):
        self.target = target
        super().__init__(listen, _RelayHandler)


class _RelayHandler(BaseRequestHandler):
    def handle(self):
        upstream = socket.create_connection(self.server.target)

        def pump(source, sink):
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (source, sink):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        other = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
        other.start()
        pump(self.request, upstream)
        other.join()
        upstream.close()


# --- one pod --------------------------------------------------------------------------------


@dataclass
class ContainerRun:
    """One container's state as the kubelet reports it."""

    spec: dict
    restarts: int = 0
    process: subprocess.Popen | None = None
    started_at: str = ""
    last: dict | None = None  # lastState.terminated
    terminated: dict | None = None
    waiting: dict | None = None
    next_start: float = 0.0
    backoff: float = BACKOFF_START
    ready: bool = False
    next_probe: float = 0.0

    @property
    def name(self) -> str:
        return self.spec["name"]

    def status(self) -> dict:
        state: dict
        if self.process is not None and self.terminated is None:
            state = {"running": {"startedAt": self.started_at}}
        elif self.terminated is not None:
            state = {"terminated": self.terminated}
        else:
            state = {"waiting": self.waiting or {"reason": "PodInitializing"}}
        running = "running" in state
        return {"name": self.name, "image": self.spec.get("image", ""), "imageID": "",
                "containerID": f"process://{self.process.pid}" if self.process else "",
                "ready": running and self.ready, "started": running,
                "restartCount": self.restarts,
                "state": state, "lastState": {"terminated": self.last} if self.last else {}}


class PodRunner(threading.Thread):
    """Runs one pod's containers to the end of the pod, reporting its status."""

    def __init__(self, agent: NodeAgent, pod: dict):
        super().__init__(daemon=True, name=f"pod-{pod['metadata']['name']}")
        self.agent = agent
        self.pod = pod
        meta = pod["metadata"]
        self.uid = meta["uid"]
        self.namespace, self.name = meta["namespace"], meta["name"]
        self.dir = agent.state_dir / "pods" / self.uid
        self.netns = f"fk-{self.uid[:13]}"
        self.address = ""
        self.inits = [ContainerRun(c) for c in pod["spec"].get("initContainers") or []]
        self.mains = [ContainerRun(c) for c in pod["spec"].get("containers") or []]
        self.deleting = threading.Event()
        self.gone = threading.Event()  # the pod object is gone: stop at once
        self.finished = False
        self.start_time = now()
        self.message = ""

    # What the pod looks like from inside.
    @property
    def hostname(self) -> str:
        return self.pod["spec"].get("hostname") or self.name

    def run(self) -> None:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.address = self.agent.network.add_pod(self.netns)
            # Before any container starts: `ip netns exec` mounts the pod's hosts file over
            # /etc/hosts only if it exists when the process starts.
            self.agent.write_hosts()
            self.volumes = self._prepare_volumes()
        except Exception as error:  # the kubelet's sandbox or volume failure: stays Pending
            self.message = f"node agent could not set up the pod: {error}"
            self._report()
            self.deleting.wait()
            self._finish()
            return
        self._report()
        self._run_containers()
        self._finish()

    def _run_containers(self) -> None:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        for init in self.inits:
            while not self.deleting.is_set():
                code = self._run_to_end(init)
                if code == 0:
                    break
                if policy == "Never":
                    self._report()
                    return
                self._sleep_backoff(init)
            if self.deleting.is_set():
                return
        while not self.deleting.is_set():
            for run in self.mains:
                if run.process is None and run.terminated is None and \
                        time.monotonic() >= run.next_start:
                    self._start(run)
                elif run.process is not None and run.terminated is None:
                    code = run.process.poll()
                    if code is not None:
                        self._terminated(run, code)
                        if self._should_restart(run, policy):
                            run.last, run.terminated = run.terminated, None
                            run.process = None
                            run.restarts += 1
                            run.waiting = {"reason": "CrashLoopBackOff", "message": (
                                f"back-off {run.backoff:.0f}s restarting failed container="
                                f"{run.name} pod={self.name}")}
                            run.next_start = time.monotonic() + run.backoff
                            run.backoff = min(run.backoff * 2, BACKOFF_MAX)
                        self._report()
            if all(r.terminated is not None for r in self.mains):
                self._report()
                return
            for run in self.mains:
                self._probe(run)
            self._refresh_volumes()
            self.deleting.wait(0.2)

    def _should_restart(self, run: ContainerRun, policy: str) -> bool:
        """container/helpers.go ShouldContainerBeRestarted: Never never, OnFailure on a
        non-zero exit, Always always; never once the pod is being deleted."""
        if self.deleting.is_set() or policy == "Never":
            return False
        return policy == "Always" or run.terminated["exitCode"] != 0

    def _sleep_backoff(self, run: ContainerRun) -> None:
        run.last, run.terminated, run.process = run.terminated, None, None
        run.restarts += 1
        run.waiting = {"reason": "CrashLoopBackOff"}
        self._report()
        self.deleting.wait(run.backoff)
        run.backoff = min(run.backoff * 2, BACKOFF_MAX)

    def _run_to_end(self, run: ContainerRun) -> int:
        if not self._start(run):
            return 1
        while (code := run.process.poll()) is None:
            if self.deleting.wait(0.2):
                self._kill([run])
                code = run.process.wait()
                break
        self._terminated(run, code)
        self._report()
        return code

    def _start(self, run: ContainerRun) -> bool:
        image = run.spec.get("image", "")
        program = self.agent.programs.get(repository_name(image))
        if not is_project_image(image) and program is None:
            known = ", ".join(sorted(self.agent.programs)) or "none"
            run.waiting = {"reason": "ErrImagePull", "message": (
                f"node agent: no local program for image {image!r}; it runs the project's "
                f"image (a repository named {PROJECT_REPOSITORY}) as this environment, and "
                f"these upstream images as their programs built here: {known}")}
            run.terminated = None
            self._report()
            return False
        try:
            env = self._environment(run.spec)
        except Exception as error:  # a missing ConfigMap or Secret key: kubelet's
            run.waiting = {"reason": "CreateContainerConfigError", "message": str(error)}
            self._report()
            return False
        logs = self.dir / "logs" / run.name
        logs.mkdir(parents=True, exist_ok=True)
        scratch = self.dir / "rootfs" / f"{run.name}-{run.restarts}"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        spec = {"hostname": self.hostname, "netns": self.netns, "scratch": str(scratch),
                "env": env,
                "cwd": run.spec.get("workingDir") or "/",
                "argv": [*(run.spec.get("command") or []), *(run.spec.get("args") or [])],
                "mounts": self._mounts(run.spec), "private_tmp": program is not None}
        if program is not None:  # the image's entrypoint (its command, or none) is the program
            spec["argv"] = [program, *(run.spec.get("args") or [])] if not run.spec.get(
                "command") else [program, *run.spec["command"][1:], *(run.spec.get("args") or [])]
        if not spec["argv"]:
            run.terminated = {"exitCode": 128, "reason": "ContainerCannotRun", "message": (
                "node agent: the container has no command (an image's entrypoint is not "
                "known here)"), "startedAt": now(), "finishedAt": now()}
            return False
        spec_file = self.dir / f"{run.name}-{run.restarts}.json"
        spec_file.write_text(json.dumps(spec))
        log = open(logs / f"{run.restarts}.log", "ab")
        run.process = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, "unshare", "--uts", sys.executable, "-m",
             "localcluster.pod_exec", str(spec_file)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        log.close()
        run.started_at, run.waiting, run.terminated = now(), None, None
        probe = run.spec.get("readinessProbe")
        run.ready = probe is None  # without a probe, ready once running (prober_manager.go)
        run.next_probe = time.monotonic() + float((probe or {}).get("initialDelaySeconds", 0))
        self._report()
        return True

    def _probe(self, run: ContainerRun) -> None:
        """The readiness probe (pkg/kubelet/prober/prober.go): an HTTP GET answered 200-399, or
        a TCP connection accepted, at the pod's address; an exec probe passes while the
        container runs (no way to run a command inside a running process here). The period is
        the probe's, at most 2 s, so that the tests wait less than a cluster would."""
        probe = run.spec.get("readinessProbe")
        if probe is None or run.process is None or run.terminated is not None or \
                time.monotonic() < run.next_probe:
            return
        run.next_probe = time.monotonic() + min(float(probe.get("periodSeconds", 10)), 2.0)
        ready = _probe_passes(probe, self.address, run.spec)
        if ready != run.ready:
            run.ready = ready
            self._report()

    def _terminated(self, run: ContainerRun, code: int) -> None:
        exit_code = code if code >= 0 else 128 - code  # a signal: 128 + its number
        run.terminated = {"exitCode": exit_code,
                          "reason": "Completed" if exit_code == 0 else "Error",
                          "startedAt": run.started_at, "finishedAt": now(),
                          "containerID": f"process://{run.process.pid}"}

    def _kill(self, runs: list[ContainerRun]) -> None:
        """SIGTERM, then SIGKILL after the grace period (kuberuntime_container.go)."""
        live = [r for r in runs if r.process is not None and r.process.poll() is None]
        for run in live:
            _signal_group(run.process, signal.SIGTERM)
        grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        deadline = time.monotonic() + (0 if self.gone.is_set() else grace)
        for run in live:
            while run.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if run.process.poll() is None:
                _signal_group(run.process, signal.SIGKILL)
                run.process.wait()
            if run.terminated is None:
                self._terminated(run, run.process.returncode)

    def _finish(self) -> None:
        self._kill(self.inits + self.mains)
        self.finished = True
        self.agent.network.remove_pod(self.netns)
        if not self.gone.is_set():
            self._report()
        if self.deleting.is_set() and not self.gone.is_set():
            self.agent.delete_pod(self.namespace, self.name, self.uid)
        elif self.deleting.is_set():
            for record in self.dir.glob("rootfs/*/made-on-host"):
                self.agent.made_on_host.update(record.read_text().splitlines())
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- the pod's environment and volumes ------------------------------------------------

    def _environment(self, container: dict) -> dict[str, str]:
        api = self.agent.api
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:"
                       "/usr/sbin:/usr/bin:/sbin:/bin",
               "HOME": "/root", "HOSTNAME": self.hostname,
               "KUBERNETES_SERVICE_HOST": self.agent.network.gateway,
               "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
               "KUBERNETES_PORT": f"tcp://{self.agent.network.gateway}:443"}
        for source in container.get("envFrom") or []:
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                data = api.config_map_data(self.namespace, source["configMapRef"])
            else:
                data = api.secret_data(self.namespace, source["secretRef"])
            env.update({prefix + k: v for k, v in (data or {}).items()})
        for variable in container.get("env") or []:
            value = self._env_value(container, variable, env)
            if value is not None:
                env[variable["name"]] = value
        return env

    def _env_value(self, container: dict, variable: dict, env: dict) -> str | None:
        if "valueFrom" not in variable:
            # $(VAR) references to earlier variables (third_party/forked/golang/expansion).
            value = variable.get("value", "")
            for name, known in env.items():
                value = value.replace(f"$({name})", known)
            return value
        source = variable["valueFrom"]
        if "fieldRef" in source:
            return self._field(source["fieldRef"]["fieldPath"])
        if "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            kind, _, resource = ref["resource"].partition(".")
            value = ((container.get("resources") or {}).get(kind) or {}).get(resource)
            return str(value) if value is not None else (
                str(os.cpu_count()) if resource == "cpu" else str(_memory_bytes()))
        optional = source.get("configMapKeyRef", source.get("secretKeyRef", {})).get("optional")
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            data = self.agent.api.config_map_data(self.namespace, ref)
        else:
            ref = source["secretKeyRef"]
            data = self.agent.api.secret_data(self.namespace, ref)
        if data is None or ref["key"] not in data:
            if optional:
                return None
            raise KeyError(f"couldn't find key {ref['key']} in {ref['name']}")
        return data[ref["key"]]

    def _field(self, path: str) -> str:
        """The downward API's fields (pkg/kubelet/kubelet_pods.go podFieldSelectorRuntimeValue
        and pkg/fieldpath)."""
        meta = self.pod["metadata"]
        if path.startswith("metadata.labels['") or path.startswith("metadata.annotations['"):
            kind, key = path.split("['", 1)
            return (meta.get(kind.split(".")[1]) or {}).get(key.rstrip("']"), "")
        return {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"],
                "metadata.uid": meta["uid"], "spec.nodeName": NODE_NAME,
                "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", ""),
                "status.podIP": self.address, "status.podIPs": self.address,
                "status.hostIP": "127.0.0.1", "status.hostIPs": "127.0.0.1"}.get(path, "")

    def _prepare_volumes(self) -> dict[str, Path]:
        volumes: dict[str, Path] = {}
        api = self.agent.api
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            path = self.dir / "volumes" / name
            if "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                path = self.agent.claim_dir(self.namespace, claim)
            elif "hostPath" in volume:
                path = Path(volume["hostPath"]["path"])
            else:
                path.mkdir(parents=True, exist_ok=True)
                files: dict[str, bytes] = {}
                if "configMap" in volume:
                    data = api.config_map_data(self.namespace, volume["configMap"]) or {}
                    files = _items(volume["configMap"], {k: v.encode() for k, v in data.items()})
                elif "secret" in volume:
                    ref = {"name": volume["secret"]["secretName"],
                           "optional": volume["secret"].get("optional")}
                    data = api.secret_data(self.namespace, ref) or {}
                    files = _items(volume["secret"], {k: v.encode() for k, v in data.items()})
                elif "projected" in volume:
                    files = self._projected(volume["projected"])
                elif "downwardAPI" in volume:
                    files = {item["path"]: self._field(item["fieldRef"]["fieldPath"]).encode()
                             for item in volume["downwardAPI"].get("items") or []
                             if "fieldRef" in item}
                for relative, content in files.items():
                    target = path / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(content)
            volumes[name] = path
        return volumes

    def _refresh_volumes(self) -> None:
        """ConfigMap and Secret volumes follow their objects, as the kubelet's periodic sync
        updates them (pkg/volume/util/atomic_writer.go); every 2 s here. A webhook's serving
        certificate, written into its Secret by the operator's own cert rotation, reaches the
        operator this way."""
        if time.monotonic() < getattr(self, "_next_refresh", 0.0):
            return
        self._next_refresh = time.monotonic() + 2.0
        api = self.agent.api
        for volume in self.pod["spec"].get("volumes") or []:
            try:
                if "configMap" in volume:
                    data = api.config_map_data(self.namespace, volume["configMap"]) or {}
                    files = _items(volume["configMap"], {k: v.encode() for k, v in data.items()})
                elif "secret" in volume:
                    ref = {"name": volume["secret"]["secretName"],
                           "optional": volume["secret"].get("optional")}
                    data = api.secret_data(self.namespace, ref) or {}
                    files = _items(volume["secret"], {k: v.encode() for k, v in data.items()})
                else:
                    continue
            except Exception:  # the next sync tries again
                continue
            for relative, content in files.items():
                target = self.volumes[volume["name"]] / relative
                if not target.exists() or target.read_bytes() != content:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    partial = target.with_name(target.name + ".partial")
                    partial.write_bytes(content)
                    os.replace(partial, target)

    def _projected(self, projected: dict) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        api = self.agent.api
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                spec = source["serviceAccountToken"]
                token = api.token(self.namespace,
                                  self.pod["spec"].get("serviceAccountName", "default"),
                                  self.pod["metadata"], spec.get("audience"),
                                  spec.get("expirationSeconds", 3607))
                files[spec["path"]] = token.encode()
            elif "configMap" in source:
                data = api.config_map_data(self.namespace, source["configMap"]) or {}
                files.update(_items(source["configMap"],
                                    {k: v.encode() for k, v in data.items()}))
            elif "secret" in source:
                data = api.secret_data(self.namespace, source["secret"]) or {}
                files.update(_items(source["secret"], {k: v.encode() for k, v in data.items()}))
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    if "fieldRef" in item:
                        files[item["path"]] = self._field(item["fieldRef"]["fieldPath"]).encode()
        return files

    def _mounts(self, container: dict) -> list[list]:
        mounts = []
        for mount in container.get("volumeMounts") or []:
            source = self.volumes[mount["name"]]
            if mount.get("subPath"):
                source = source / mount["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
            mounts.append([str(source), mount["mountPath"], bool(mount.get("readOnly"))])
        return mounts

    # --- status ---------------------------------------------------------------------------

    def phase(self) -> str:
        """kubelet_pods.go getPhase, for the containers this agent runs."""
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if any(i.terminated is None or i.terminated["exitCode"] != 0 for i in self.inits):
            failed_init = any(i.terminated and i.terminated["exitCode"] != 0 for i in self.inits)
            return "Failed" if failed_init and policy == "Never" else "Pending"
        states = [r.status()["state"] for r in self.mains]
        if any("running" in s for s in states):
            return "Running"
        if self.mains and all("terminated" in s for s in states):
            if all(s["terminated"]["exitCode"] == 0 for s in states):
                return "Succeeded"
            return "Failed"
        if any(r.waiting and r.waiting.get("reason") == "CrashLoopBackOff" for r in self.mains):
            return "Running"
        return "Pending"

    def _report(self) -> None:
        if self.gone.is_set():
            return
        phase = self.phase()
        initialized = all(i.terminated and i.terminated["exitCode"] == 0 for i in self.inits)
        ready = phase == "Running" and all(r.status()["ready"] for r in self.mains)
        moment = now()

        def condition(kind: str, value: bool) -> dict:
            return {"type": kind, "status": "True" if value else "False",
                    "lastTransitionTime": moment}

        status = {"phase": phase, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                  "startTime": self.start_time,
                  "conditions": [condition("PodReadyToStartContainers", bool(self.address)),
                                 condition("Initialized", initialized),
                                 condition("ContainersReady", ready),
                                 condition("Ready", ready),
                                 {"type": "PodScheduled", "status": "True",
                                  "lastTransitionTime": moment}],
                  "initContainerStatuses": [i.status() for i in self.inits] or None,
                  "containerStatuses": [r.status() for r in self.mains]}
        if self.address:
            status.update(podIP=self.address, podIPs=[{"ip": self.address}])
        if self.message:
            status["message"] = self.message
        self.agent.api.patch_pod_status(self.namespace, self.name, status)


def _probe_passes(probe: dict, address: str, container: dict) -> bool:
    def port_of(value) -> int:
        if isinstance(value, int) or str(value).isdigit():
            return int(value)
        return next(int(p["containerPort"]) for p in container.get("ports") or []
                    if p.get("name") == value)

    timeout = float(probe.get("timeoutSeconds", 1))
    try:
        if "httpGet" in probe:
            get = probe["httpGet"]
            scheme = get.get("scheme", "HTTP").lower()
            url = f"{scheme}://{address}:{port_of(get['port'])}{get.get('path', '/')}"
            context = ssl._create_unverified_context() if scheme == "https" else None
            import urllib.request

            with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
                return 200 <= response.status < 400
        if "tcpSocket" in probe:
            with socket.create_connection((address, port_of(probe["tcpSocket"]["port"])),
                                          timeout=timeout):
                return True
        return True  # exec, grpc: see _probe
    except (OSError, StopIteration, ValueError):
        return False


def _items(source: dict, data: dict[str, bytes]) -> dict[str, bytes]:
    if source.get("items"):
        return {item["path"]: data[item["key"]] for item in source["items"]
                if item["key"] in data}
    return data


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


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
                 subnet: int, gpus: int = 0, programs: dict[str, str] | None = None):
        self.api = AgentApi(kubeconfig)
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
        relay = _Relay((self.network.gateway, 443), self.api_server)
        threading.Thread(target=relay.serve_forever, daemon=True).start()
        self.log_port = self._serve_logs()
        self._register()
        self._storage_class()
        threading.Thread(target=self._heartbeat, daemon=True).start()
        try:
            while not self.stopping.is_set():
                self._sync()
                self.stopping.wait(POLL_SECONDS)
        finally:
            for runner in self.runners.values():
                runner.gone.set()
                runner.deleting.set()
            for runner in self.runners.values():
                runner.join(timeout=5)
            relay.shutdown()
            self.network.down()
            self._remove_made_on_host()

    def _remove_made_on_host(self) -> None:
        """Mount paths directly under / that containers needed (pod_exec.Paths), if empty."""
        for record in (self.state_dir / "pods").glob("*/rootfs/*/made-on-host"):
            self.made_on_host.update(record.read_text().splitlines())
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

    def write_hosts(self) -> None:
        """Each running pod's hosts file: every pod's own names and each headless Service's
        (see the module docstring)."""
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
            selector = (service.get("spec") or {}).get("selector")
            if not selector or service["spec"].get("clusterIP") not in ("None", None):
                continue
            ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
            ready_only = not service["spec"].get("publishNotReadyAddresses")
            for runner in sorted(runners, key=lambda r: r.name):
                labels = runner.pod["metadata"].get("labels") or {}
                if runner.namespace == ns and all(labels.get(k) == v
                                                  for k, v in selector.items()):
                    if ready_only and runner.phase() != "Running":
                        continue
                    for suffix in ("", ".svc", ".svc.cluster.local"):
                        names.setdefault(f"{name}.{ns}{suffix}", runner.address)
                    break
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
    args = parser.parse_args(argv)
    host, port = args.api_server.rsplit(":", 1)
    programs = dict(item.split("=", 1) for item in args.program)
    agent = NodeAgent(args.kubeconfig, (host, int(port)), args.state_dir, args.subnet,
                      args.gpus, programs)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    agent.run()


if __name__ == "__main__":
    main()
