"""One pod on the node agent (see :mod:`localcluster.node_agent` for the rules it follows):
its containers run as processes in the pod's network namespace, its volumes prepared as
directories, its status reported as the kubelet reports it."""

from __future__ import annotations

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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fmnist_kfp.launcher.local_processes import _die_with_parent  # PR_SET_PDEATHSIG

NODE_NAME = "local-node"
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # pkg/kubelet/kubelet.go 216, MaxContainerBackOff
PROJECT_REPOSITORY = "fmnist-kfp"
MIN_GRACE_SECONDS = 2.0


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

    def __init__(self, agent, pod: dict):  # agent: localcluster.node_agent.NodeAgent
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
        # The pod's PID namespace where it shares one (see _start_pause).
        self.pause: subprocess.Popen | None = None
        self.pause_pid = 0

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
            self.agent.write_resolv_conf(self)
            self.agent.write_hosts()
            self.volumes = self._prepare_volumes()
            if self.pod["spec"].get("shareProcessNamespace"):
                self._start_pause()
        except Exception as error:  # the kubelet's sandbox or volume failure: stays Pending
            self.message = f"node agent could not set up the pod: {error}"
            self._report()
            self.deleting.wait()
            self._finish()
            return
        self._report()
        self._run_containers()
        self._finish()

    def _start_pause(self) -> None:
        """A PID namespace for the pod's containers (``shareProcessNamespace``), as the pause
        container's: its first process is the namespace's pid 1 and reaps orphans, and each
        container's process enters it with parent pid 0 there, which is how Katib's metrics
        collector tells the containers' processes from its own children (kubeflow/katib
        v0.19.0 pkg/metricscollector/v1beta1/common/pns.go 56-110)."""
        self.pause = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-m",
             "localcluster.pod_exec", "--pause"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        deadline = time.monotonic() + 10
        while not (children := _children(self.pause.pid)):
            if self.pause.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the pod's PID namespace did not start")
            time.sleep(0.01)
        self.pause_pid = children[0]

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
                "env": env, "own_proc": self.pause is not None,
                "cwd": run.spec.get("workingDir") or "/",
                "argv": [expand(word, env) for word in
                         [*(run.spec.get("command") or []), *(run.spec.get("args") or [])]],
                "mounts": self._mounts(run.spec), "private_tmp": program is not None}
        if program is not None:  # the image's entrypoint (its command, or none) is the program
            spec["argv"] = [program, *spec["argv"][1 if run.spec.get("command") else 0:]]
        if not spec["argv"]:
            run.terminated = {"exitCode": 128, "reason": "ContainerCannotRun", "message": (
                "node agent: the container has no command (an image's entrypoint is not "
                "known here)"), "startedAt": now(), "finishedAt": now()}
            return False
        spec_file = self.dir / f"{run.name}-{run.restarts}.json"
        spec_file.write_text(json.dumps(spec))
        log = open(logs / f"{run.restarts}.log", "ab")
        # In the pod's PID namespace where it has one: nsenter forks the container's process
        # into it (parent pid 0 there) and exits with its exit status.
        enter = ["nsenter", f"--target={self.pause_pid}", "--pid", "--"] if self.pause else []
        run.process = subprocess.Popen(
            [*enter, "ip", "netns", "exec", self.netns, "unshare", "--uts", sys.executable,
             "-m", "localcluster.pod_exec", str(spec_file)],
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
            if self.pause is not None:
                # To the container's process alone, as a runtime signals its init: nsenter,
                # its parent outside the namespace, must stay to report its exit status.
                for child in _children(run.process.pid):
                    _signal(child, signal.SIGTERM)
            else:
                _signal_group(run.process, signal.SIGTERM)
        grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        # Never under the kubelet's minimum, even for a pod force-deleted with grace 0
        # (pkg/kubelet/kuberuntime/kuberuntime_container.go minimumGracePeriodInSeconds).
        deadline = time.monotonic() + max(float(grace), MIN_GRACE_SECONDS)
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
        if self.pause is not None:  # the namespace's pid 1: the kernel kills what is left
            _signal_group(self.pause, signal.SIGKILL)
            self.pause.wait()
        # Under the hosts lock: a hosts write that counted this pod as running would otherwise
        # write into the /etc/netns folder being removed (FileNotFoundError in the agent's sync).
        with self.agent.hosts_lock:
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
               "KUBERNETES_SERVICE_HOST": self.agent.network.host_address,
               "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
               "KUBERNETES_PORT": f"tcp://{self.agent.network.host_address}:443"}
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
            # $(VAR) references to earlier variables (kubelet_pods.go makeEnvironmentVariables).
            return expand(variable.get("value", ""), env)
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
                files: dict[str, bytes] = self._object_files(volume) or {}
                if "projected" in volume:
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

    def _object_files(self, volume: dict) -> dict[str, bytes] | None:
        """The files of a ConfigMap or Secret volume; None for any other kind."""
        api = self.agent.api
        if "configMap" in volume:
            source = volume["configMap"]
            data = api.config_map_data(self.namespace, source) or {}
        elif "secret" in volume:
            source = volume["secret"]
            data = api.secret_data(self.namespace, {"name": source["secretName"],
                                                    "optional": source.get("optional")}) or {}
        else:
            return None
        return _items(source, {k: v.encode() for k, v in data.items()})

    def _refresh_volumes(self) -> None:
        """ConfigMap and Secret volumes follow their objects, as the kubelet's periodic sync
        updates them (pkg/volume/util/atomic_writer.go); every 2 s here. A webhook's serving
        certificate, written into its Secret by the operator's own cert rotation, reaches the
        operator this way."""
        if time.monotonic() < getattr(self, "_next_refresh", 0.0):
            return
        self._next_refresh = time.monotonic() + 2.0
        for volume in self.pod["spec"].get("volumes") or []:
            try:
                files = self._object_files(volume)
            except Exception:  # the next sync tries again
                continue
            if files is None:
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


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' variable expansion in env values, commands and args (kubernetes v1.34.1
    third_party/forked/golang/expansion/expand.go): ``$(NAME)`` becomes the variable's value
    where it is defined and stays as written where not, ``$$`` becomes ``$`` (so Katib's
    ``$$$$.pid`` reaches the shell as ``$$.pid``), any other ``$`` stays."""
    out, cursor = [], 0
    while cursor < len(text):
        char = text[cursor]
        if char != "$" or cursor + 1 == len(text):
            out.append(char)
            cursor += 1
            continue
        following = text[cursor + 1]
        if following == "$":
            out.append("$")
            cursor += 2
        elif following == "(":
            closer = text.find(")", cursor + 2)
            if closer == -1:  # an incomplete reference: kept
                out.append("$(")
                cursor += 2
            else:
                name = text[cursor + 2:closer]
                out.append(env[name] if name in env else f"$({name})")
                cursor = closer + 1
        else:
            out.append("$" + following)
            cursor += 2
    return "".join(out)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _children(pid: int) -> list[int]:
    """The host pids of process ``pid``'s children."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(word) for word in handle.read().split()]
    except OSError:
        return []



def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


