"""`python -m localcluster build|up|down|status`: the local control plane by hand.

`up` builds what is missing (cached outside the checkout, minutes the first time), starts the
programs detached, installs the operators ``--operators`` names from their own manifests, and
prints the kubeconfig to use; `down` stops them. The tests start their
own cluster (tests/cluster.py) and stop it when they end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from localcluster.build import build
from localcluster.control_plane import ControlPlane, stop_recorded
from localcluster.operators import BY_NAME
from localcluster.programs import MODULES

DEFAULT_STATE_DIR = Path(".build/localcluster")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("build", "up", "down", "status"))
    parser.add_argument("--no-node", action="store_true",
                        help="start no node agent (it runs pods, and needs root)")
    parser.add_argument("--gpus", type=int, default=0,
                        help="nvidia.com/gpu the node offers; its pods run on the CPU")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="where the cluster's keys, data and logs live (%(default)s)")
    parser.add_argument("--operators", default="", metavar="NAME,...",
                        help="operators to install on the node: " + ", ".join(BY_NAME))
    args = parser.parse_args(argv)
    wanted = [name for name in args.operators.split(",") if name]
    if unknown := [name for name in wanted if name not in BY_NAME]:
        parser.error(f"unknown operator {', '.join(unknown)}: choose from {', '.join(BY_NAME)}")
    if wanted and args.no_node:
        parser.error("--operators runs their pods on the node: leave out --no-node")
    state_dir = args.state_dir.resolve()
    if args.command == "build":
        for module in MODULES:
            built = build(module)
            how = "cached" if built.cached else f"built in {built.seconds:.0f} s"
            print(f"{module.name}: {built.bin_dir} ({how})", flush=True)
        from localcluster.operators import KATIB_V0_19, programs

        programs([KATIB_V0_19])  # Katib's Python services too (katib_services.py)
    elif args.command == "up":
        if (state_dir / "state.json").exists():
            print(f"a cluster is recorded in {state_dir}: `python -m localcluster down` first",
                  file=sys.stderr)
            return 1
        from localcluster import operators

        started = time.monotonic()
        chosen = [BY_NAME[name] for name in wanted]
        plane = ControlPlane(state_dir, die_with_parent=False).start(
            node_agent=not args.no_node, gpus=args.gpus,
            programs=operators.programs(chosen) if chosen else None)
        print(f"control plane {plane.server} up in {time.monotonic() - started:.1f} s; logs in "
              f"{state_dir / 'logs'}", flush=True)
        if chosen:
            from kubernetes import config

            api_client = config.new_client_from_config(str(plane.kubeconfig("admin")))
            for operator in chosen:
                operators.install(api_client, operator)
                print(f"{operator.name} available after {time.monotonic() - started:.1f} s",
                      flush=True)
        print(f"export KUBECONFIG={plane.kubeconfig('admin')}")
    elif args.command == "down":
        stopped = stop_recorded(state_dir)
        print("stopped " + ", ".join(stopped) if stopped else "nothing was running")
    else:
        state = state_dir / "state.json"
        print(state.read_text() if state.exists() else json.dumps({"running": False}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
