"""A rollout of real agent processes, built as signed zipapps, through the real Console and the
fleet-rollout flow: the chart page's "Fleet rollouts fail against healthy hosts" made impossible.

Two agents' program directories are made read-only *after* the rollout was planned (a private
mount namespace per agent, remounted read-only with nsenter), so their self_update fails with
the real rename error, the canary crosses the threshold, the rollout stalls, and no agent of the
later wave receives anything. Resumed from the Console, the flow carries on.
"""

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from contracts.vocabulary.rollouts import TargetStatus
from rollout_policy import AgentId, PercentGrowth, WavePolicy, plan_waves
from testkit.agents import AgentProcess
from testkit.builds import suite_signing_key
from testkit.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
MOUNT = 'mount --make-rprivate / && mount --bind "$0" "$0" && exec "$@"'


def _build(out: Path, version: str, key: Path) -> dict:
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/build_agent.py"),
            "--version",
            version,
            "--out",
            str(out),
            "--signing-key",
            str(key),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(r.stdout)


def _namespaces_work(tmp: Path) -> bool:
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", MOUNT, str(tmp), "true"], capture_output=True
    )
    return probe.returncode == 0


@pytest.fixture
def builds(tmp_path):
    # The suite's key: the test Console trusts it (PROXIMA_SIGNING_PUBLIC_KEYS).
    key, public_key = suite_signing_key(tmp_path / "keys")
    return {
        "old": _build(tmp_path / "dist", "0.8.0", key),
        "new": _build(tmp_path / "dist", "0.9.0", key),
        "public_key": public_key,
    }


def test_read_only_failures_stall_the_canary_and_the_later_wave_receives_nothing(
    flow_console, agents, builds, tmp_path
):
    from flows.rollout import fleet_rollout

    if not _namespaces_work(tmp_path):
        pytest.fail("this test needs private mount namespaces (unshare -m, as root)")
    token = flow_console.install_token()
    hosts: list[AgentProcess] = []
    for i in range(4):
        bin_dir = tmp_path / f"host-{i}" / "bin"
        bin_dir.mkdir(parents=True)
        program = bin_dir / "proxima-agent.pyz"
        shutil.copy2(builds["old"]["artifact"], program)
        proc = agents(
            flow_console,
            f"host-{i}",
            token,
            start=False,
            wrapper=["unshare", "-m", "sh", "-c", MOUNT, str(bin_dir)],
            program=program,
            env={
                "PROXIMA_SIGNING_PUBLIC_KEY": builds["public_key"],
                "PROXIMA_UPDATE_HEALTH_TIMEOUT": "20s",
            },
        )
        hosts.append(proc.start())
    ids = [h.agent_id() for h in hosts]
    for h in hosts:
        h.wait_ready()
    wait_for(
        lambda: all(
            flow_console.agent(i)["version"] == "0.8.0" and flow_console.agent(i)["can_self_update"]
            for i in ids
        ),
        what="every agent online, able to self-update",
    )
    # A seed whose canary is hosts 0 and 1: those two will fail.
    policy = WavePolicy(canary_size=2, growth=PercentGrowth((100,)))
    doomed = {ids[0], ids[1]}
    seed = next(
        f"s{n}"
        for n in range(10_000)
        if set(plan_waves(sorted(AgentId(i) for i in ids), policy, f"s{n}").waves[0].agent_ids)
        == doomed
    )
    with flow_console.client() as c:
        hosted = c.put(
            "/api/v1/artifacts/0.9.0",
            params={"signature": builds["new"]["signature"]},
            content=Path(builds["new"]["artifact"]).read_bytes(),
        )
        hosted.raise_for_status()
        r = c.post(
            "/api/v1/fleet/rollouts",
            json={
                "name": "e2e",
                "artifact": hosted.json(),
                "start_flow": False,
                "seed": seed,
                "waves": {"canary_size": 2, "percentages": [100]},
                "criteria": [{"failure_type": "failed", "threshold_count": 1, "min_executed": 1}],
                "wave_timeout_seconds": 60,
            },
        )
        r.raise_for_status()
        rollout = r.json()
    assert {t["agent_id"] for t in rollout["targets"] if t["wave"] == 0} == doomed
    for h in hosts[:2]:  # their image layer turns read-only after planning
        bin_dir = Path(h.argv[5])
        subprocess.run(
            [
                "nsenter",
                "-t",
                str(h.process.pid),
                "-m",
                "mount",
                "-o",
                "remount,bind,ro",
                str(bin_dir),
            ],
            check=True,
        )
    outcome = {}
    thread = threading.Thread(
        target=lambda: outcome.update(
            fleet_rollout(rollout_id=rollout["id"], poll_seconds=0.2, decision_poll_seconds=1)
        )
    )
    thread.start()
    try:
        stalled = wait_for(
            lambda: (
                (x := flow_console.client().get(f"/api/v1/fleet/rollouts/{rollout['id']}").json())[
                    "state"
                ]
                == "stalled"
                # Resume only once every canary result is in: a result that arrives after the
                # resume is judged again and may stall the rollout a second time (as designed).
                and all(TargetStatus(t["status"]).final for t in x["targets"] if t["wave"] == 0)
                and x
            ),
            timeout=60,
            what="the canary stalls the rollout and both canary results are in",
        )
        errors = [t["error"] for t in stalled["targets"] if t["error"]]
        assert any(
            e.startswith("backup current binary: rename ") and e.endswith(": read-only file system")
            for e in errors
        ), errors
        # The same failure as a fact, kept from the agent's result for the flows.
        kinds = [t["failure_kind"] for t in stalled["targets"] if t["status"] == "failed"]
        assert kinds and set(kinds) == {"read_only_program"}, kinds
        later = [t for t in stalled["targets"] if t["wave"] == 1]
        assert later, "no later wave to hold back"
        assert all(t["status"] == "pending" and t["command_id"] is None for t in later)
        assert all(flow_console.agent(t["agent_id"])["version"] == "0.8.0" for t in later)
        with flow_console.client() as c:
            assert (
                c.post(f"/api/v1/fleet/rollouts/{rollout['id']}/resume").json()["state"]
                == "running"
            )
        thread.join(timeout=120)
    finally:
        thread.join(timeout=5)
    assert outcome.get("state") == "succeeded", outcome
    final = flow_console.client().get(f"/api/v1/fleet/rollouts/{rollout['id']}").json()
    assert {t["agent_id"] for t in final["targets"] if t["status"] == "succeeded"} == set(ids[2:])
    wait_for(
        lambda: all(flow_console.agent(i)["version"] == "0.9.0" for i in ids[2:]),
        what="later wave on 0.9.0",
    )
    assert all(flow_console.agent(i)["version"] == "0.8.0" for i in ids[:2])
