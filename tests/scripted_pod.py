"""A training pod's workload, scripted by a test: what the image `scripted-pod` runs on the
local cluster's node (tests/cluster.py maps it with the node agent's ``--program``).

The launcher tests need the real API server, the real operators and real pods, but not real
training: they need a worker that exits 137 once and then 0, or prints a traceback and exits 2.
Upstream controllers are tested the same way (pods of a shell image running ``exit 1``). The
container's command (the trainer's, as the job builders make it) is ignored; each start reads
``scripts.json`` from the root of the claim mounted at ``/mnt/fmnist`` (the settings' default
``mount_path``), keyed by the pod's hostname (a TFJob pod's name; a JobSet pod's stable
``<jobset>-node-0-0``), falling back to ``"*"``:

    {"<hostname>": {"exits": [137, 0], "log": "lines to print", "seconds": 1.0, "before": 0,
                    "until": "release"}}

The n-th start of a hostname (counted in ``starts/<hostname>`` on the claim, so a recreated pod
and a restarted container both count) sleeps ``before`` seconds (default 0: a trainer's start
before its first epoch line), prints ``log``, sleeps ``seconds`` (default 1; a list: its n-th,
as for exits) and exits with ``exits[n]`` (the last one once they run out; 0 when none is
given). With ``until``, it first waits for that file to appear on the claim: a test holds the
pod running until it has seen what it waits for, whatever the machine's load.
"""

import json
import os
import socket
import sys
import time

CLAIM = "/mnt/fmnist"


def main() -> int:
    host = socket.gethostname()
    with open(os.path.join(CLAIM, "scripts.json")) as handle:
        scripts = json.load(handle)
    script = scripts.get(host, scripts.get("*", {}))
    starts = os.path.join(CLAIM, "starts")
    os.makedirs(starts, exist_ok=True)
    with open(os.path.join(starts, host), "a+") as counter:
        counter.seek(0)
        start = len(counter.read().splitlines())
        counter.write(f"{time.time()}\n")
    print(f"{host}: start {start}", flush=True)
    time.sleep(script.get("before", 0))
    while script.get("until") and not os.path.exists(os.path.join(CLAIM, script["until"])):
        time.sleep(0.2)
    if script.get("log"):
        print(script["log"], end="" if script["log"].endswith("\n") else "\n", flush=True)
    time.sleep(_nth(script.get("seconds", 1.0), start))
    return _nth(script.get("exits") or 0, start)


def _nth(value, start: int):
    """``value``, or where it is a list its ``start``-th item (the last once they run out)."""
    if isinstance(value, list):
        return value[min(start, len(value) - 1)]
    return value


if __name__ == "__main__":
    sys.exit(main())
