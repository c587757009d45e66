"""Run the double on its own: `python -m testkit.kube --kubeconfig /tmp/kc --pods 5000`.

Prints one JSON line (`url`, `token`, `kubeconfig`) once it listens, then serves until SIGINT
or SIGTERM. For demos and for poking at it with kubectl or the client by hand; tests start it
in-process with `KubeApiDouble` instead, so they can inject faults and read the request log.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from testkit.kube.fleet import FleetSpec, preload_fleet
from testkit.kube.server import KubeApiDouble, RolloutsMode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.kube", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig for the double here")
    parser.add_argument("--pods", type=int, default=0, help="preload a fleet with this many pods")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rollouts", choices=[m.value for m in RolloutsMode], default="present")
    parser.add_argument("--tls", action="store_true", help="serve https (needed by kubectl)")
    parser.add_argument("--anonymous", action="store_true", help="accept requests without a token")
    args = parser.parse_args(argv)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    double = KubeApiDouble(
        port=args.port or None,
        rollouts=RolloutsMode(args.rollouts),
        tls=args.tls,
        require_auth=not args.anonymous,
    )
    with double:
        if args.pods:
            preload_fleet(double, FleetSpec(pods=args.pods, nodes=args.nodes))
        kubeconfig = double.write_kubeconfig(args.kubeconfig) if args.kubeconfig else None
        info = {"url": double.url, "token": double.token, "kubeconfig": str(kubeconfig or "")}
        print(json.dumps(info), flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
