"""A leader-election candidate process, and the test-side handle that runs it.

The child (`python -m testkit.kube.candidate --identity a`) uses nothing but the official
client: `kubernetes.config.load_kube_config()` (so $KUBECONFIG points it at the double) and
`kubernetes.leaderelection` with a `LeaseLock`. It prints one JSON line per transition:
`{"event": "leading" | "stopped", "identity": …, "at": <unix time>}`.

The library refuses a retry period under 1 s; the child builds a valid config and then lowers
it, so that elections in tests turn in fractions of a second.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from testkit import REPO


def _say(event: str, identity: str) -> None:
    print(json.dumps({"event": event, "identity": identity, "at": time.time()}), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--lease", default="proxima-cluster-agent")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--lease-duration", type=int, default=2)
    parser.add_argument("--renew-deadline", type=float, default=1.5)
    parser.add_argument("--retry-period", type=float, default=0.2)
    args = parser.parse_args(argv)

    from kubernetes import config
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    config.load_kube_config()  # type: ignore[no-untyped-call]
    lock = LeaseLock(args.lease, args.namespace, args.identity)  # type: ignore[no-untyped-call]
    election = electionconfig.Config(  # type: ignore[no-untyped-call]
        lock,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=1,
        onstarted_leading=lambda: _say("leading", args.identity),
        onstopped_leading=lambda: _say("stopped", args.identity),
    )
    election.retry_period = args.retry_period
    leaderelection.LeaderElection(election).run()  # type: ignore[no-untyped-call]
    return 0


@dataclass
class Candidate:
    """A running candidate process; `events` fills from its stdout as lines arrive."""

    identity: str
    env: Mapping[str, str]
    lease: str = "proxima-cluster-agent"
    namespace: str = "default"
    lease_duration: int = 2
    retry_period: float = 0.2
    events: list[dict[str, object]] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None

    def start(self) -> Candidate:
        command = [
            sys.executable,
            "-m",
            "testkit.kube.candidate",
            "--identity",
            self.identity,
            "--lease",
            self.lease,
            "--namespace",
            self.namespace,
            "--lease-duration",
            str(self.lease_duration),
            "--renew-deadline",
            str(self.lease_duration * 0.75),
            "--retry-period",
            str(self.retry_period),
        ]
        env = {**os.environ, "PYTHONPATH": str(REPO), **self.env}
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue

    @property
    def leading(self) -> bool:
        return any(e["event"] == "leading" for e in self.events) and self.alive

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


if __name__ == "__main__":
    raise SystemExit(main())
