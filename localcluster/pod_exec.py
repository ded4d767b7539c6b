"""The last step of starting a container, run inside the pod's network namespace (`ip netns
exec`, which gives the process a mount namespace of its own) and a UTS namespace of its own
(`unshare --uts`): the pod's hostname, its volumes bind-mounted at their mount paths, then the
container's command in place of this process. Mounts made here are the container's alone.

A mount path that does not exist is made without touching the host's filesystem: the nearest
folder above it that exists gets an overlay whose upper layer is the pod's own scratch folder,
and the path is made in the overlay (a mount path directly under ``/`` is the exception: made on
the host, empty, and recorded; the node agent removes it when it stops). So a pod's
``/var/run/secrets/kubernetes.io/serviceaccount`` exists for the pod alone, and the host's
programs never take themselves for pods.

`python -m localcluster.pod_exec <spec.json>`; the spec is written by the node agent:
``{"hostname", "netns", "scratch", "mounts": [[source, target, read_only]], "env", "cwd",
"argv"}``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


class Paths:
    """Makes mount paths inside overlays of the container's own (see the module docstring)."""

    def __init__(self, scratch: str, netns: str):
        self.scratch = scratch
        self.netns = netns
        self.overlaid: set[str] = set()

    def make(self, target: str, directory: bool) -> None:
        if os.path.lexists(target):
            return
        anchor = os.path.dirname(target)
        while not os.path.lexists(anchor):
            anchor = os.path.dirname(anchor)
        real = os.path.realpath(anchor)
        if real != "/" and real not in self.overlaid:
            layer = os.path.join(self.scratch, str(len(self.overlaid)))
            upper, work = os.path.join(layer, "upper"), os.path.join(layer, "work")
            os.makedirs(upper)
            os.makedirs(work)
            _mount("-t", "overlay", "overlay", "-o",
                   f"lowerdir={real},upperdir={upper},workdir={work}", real)
            self.overlaid.add(real)
            self._keep_network_files(real)
        if real == "/":  # made on the host: recorded, for the node agent to remove
            with open(os.path.join(self.scratch, "made-on-host"), "a") as record:
                record.write(target + "\n")
        if directory:
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()

    def _keep_network_files(self, overlaid: str) -> None:
        """An overlay over /etc hides the pod's hosts and resolv.conf, which `ip netns exec`
        bound over /etc's before: bind them again."""
        if overlaid != "/etc":
            return
        for name in ("hosts", "resolv.conf"):
            mine = os.path.join("/etc/netns", self.netns, name)
            if os.path.exists(mine):
                _mount("--bind", mine, os.path.join("/etc", name))


def main(spec_path: str) -> None:
    with open(spec_path) as handle:
        spec = json.load(handle)
    socket.sethostname(spec["hostname"])
    paths = Paths(spec["scratch"], spec["netns"])
    own_tmp = os.path.join(spec["scratch"], "tmp") if spec.get("private_tmp") else ""
    for source, target, read_only in spec["mounts"]:
        if own_tmp and (target == "/tmp" or target.startswith("/tmp/")):
            # Into the container's own /tmp, which replaces the host's last (below).
            target = os.path.join(own_tmp, os.path.relpath(target, "/tmp"))
            os.makedirs(target if os.path.isdir(source) else os.path.dirname(target),
                        exist_ok=True)
        else:
            paths.make(target, os.path.isdir(source))
        _mount("--bind", source, target)
        if read_only:
            _mount("-o", "remount,bind,ro", target)
    argv = spec["argv"]
    program: str | int = argv[0]
    if own_tmp:
        # The program, opened before /tmp is replaced: it may lie under /tmp (a build cache
        # there), and is then executed from this descriptor (fexecve).
        found = shutil.which(argv[0], path=spec["env"].get("PATH"))
        if found:
            program = os.open(found, os.O_RDONLY)
            # Inherited, so that a script's interpreter can read it as /dev/fd/<n>.
            os.set_inheritable(program, True)
        # An upstream program's /tmp is its own, as its image's would be: the operators on this
        # node all keep their webhook certificates in /tmp/k8s-webhook-server. Last, and with
        # what was mounted into it (--rbind), since the pod's own folders may lie under /tmp.
        os.makedirs(own_tmp, mode=0o1777, exist_ok=True)
        os.chmod(own_tmp, 0o1777)
        _mount("--rbind", own_tmp, "/tmp")
    if spec.get("own_proc"):
        # The pod's PID namespace (shareProcessNamespace): /proc shows its processes alone,
        # with the pids they have there, as in a container.
        _mount("-t", "proc", "proc", "/proc")
    os.chdir(spec["cwd"])
    try:
        if isinstance(program, int):
            os.execve(program, argv, spec["env"])
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as error:  # the kubelet's StartError: the command cannot be run
        print(f"exec {argv[0]!r}: {error}", file=sys.stderr)
        sys.exit(128)


def pause() -> None:
    """A PID namespace's first process (the pause container's part): pid 1 there, it reaps
    the processes orphaned in it until the node agent kills it."""
    import signal

    def reap(*_args) -> None:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass

    signal.signal(signal.SIGCHLD, reap)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        signal.pause()


if __name__ == "__main__":
    if sys.argv[1] == "--pause":
        pause()
    else:
        main(sys.argv[1])
