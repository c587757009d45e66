"""Seconds to preload the Kubernetes API double with a generated fleet (5,000 pods by default).

    .venv/bin/python -m bench.kube_preload [--pods 5000] [--nodes 50] [--runs 3]

Was a unit-test assertion (under 2 s); a figure to read, not a pass/fail, on a shared machine.
"""

from __future__ import annotations

import argparse
import time

from testkit.kube import FleetSpec, KubeApiDouble, preload_fleet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for run in range(1, args.runs + 1):
        with KubeApiDouble() as kube:
            started = time.perf_counter()
            preload_fleet(kube, FleetSpec(pods=args.pods, nodes=args.nodes))
            elapsed = time.perf_counter() - started
            print(f"run {run}: {args.pods} pods on {args.nodes} nodes preloaded in {elapsed:.2f} s")


if __name__ == "__main__":
    main()
