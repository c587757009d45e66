"""self_update between real builds: real agent processes, a real nats-server, real files.

Builds come from ``scripts/build_agent.py`` (0.8.0 runs, 0.9.x is offered); the broken ones are
built by the same script from a patched copy of the sources. The Console is played by a NATS
client that sends the Command and reads results and heartbeats.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.ledger import read_ledger
from agent.state import AgentState
from contracts import subjects
from contracts.messages import CommandFailureKind, CommandResult, CommandStatus, Heartbeat
from testkit.agents import AgentProcess, agent_env
from testkit.builds import ArtifactServer, Build, Builds, build_agent, make_signing_key
from testkit.nats import NatsServer
from testkit.runtime import Inbox, enrolled, send_command
from testkit.waiting import await_for

HEALTH_TIMEOUT = "4s"


@dataclass
class Host:
    """One host: its program file (a copy of the 0.8.0 build), data dir and agent process."""

    program: Path
    data_dir: Path
    state: AgentState
    agent: AgentProcess

    def program_version(self) -> str:
        out = subprocess.run(
            [sys.executable, str(self.program), "version"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout.strip()


class Console:
    """The Console's side of NATS: send commands, collect results and heartbeats."""

    def __init__(self, client: Any, agent_id: str) -> None:
        self.client = client
        self.agent_id = agent_id
        self.results = Inbox()
        self.beats = Inbox()

    async def start(self) -> None:
        await self.client.subscribe(subjects.command_result(self.agent_id), cb=self.results.handle)
        await self.client.subscribe(subjects.heartbeat(self.agent_id), cb=self.beats.handle)

    async def send(self, command_id: str, kind: str = "self_update", **args: Any) -> None:
        await send_command(self.client, self.agent_id, kind, command_id, **args)

    def raw_result(self, command_id: str) -> dict[str, Any]:
        """The result as it came over NATS, before any model reads it."""
        return next(m for m in self.results.messages if m["command_id"] == command_id)

    def results_for(self, command_id: str) -> list[CommandResult]:
        return [
            CommandResult.model_validate(m)
            for m in self.results.messages
            if m["command_id"] == command_id
        ]

    async def result(self, command_id: str, timeout: float = 30) -> CommandResult:
        await await_for(lambda: self.results_for(command_id), timeout, f"result of {command_id}")
        return self.results_for(command_id)[0]

    def versions(self) -> list[str]:
        return [Heartbeat.model_validate(m).version for m in self.beats.messages]


def install(
    tmp_path: Path,
    nats: NatsServer,
    build: Build,
    *,
    public_key: str | None,
    program_dir: Path | None = None,
    wrapper: list[str] | None = None,
    restart_on_failure: bool = False,
    allow: str | None = None,
) -> Host:
    """Install ``build`` as a host's program (enrolled already) and start it; it downloads
    builds from ``allow`` (the test's artifact server: not its Console's own URL)."""
    program_dir = program_dir or tmp_path / "bin"
    program_dir.mkdir(parents=True, exist_ok=True)
    program = program_dir / "proxima-agent"
    shutil.copy2(build.path, program)
    data_dir = tmp_path / "data"
    state = enrolled(nats, data_dir)
    nats.allow(state.public_key, state.agent_id)
    nats.reload()
    env = agent_env(
        PROXIMA_HEARTBEAT_INTERVAL="300ms",
        PROXIMA_HOST_METRICS="false",
        PROXIMA_NATS_RECONNECT_WAIT="50ms",
        PROXIMA_NATS_RECONNECT_MAX_WAIT="200ms",
        PROXIMA_UPDATE_HEALTH_TIMEOUT=HEALTH_TIMEOUT,
    )
    env.pop("PYTHONPATH", None)  # a build brings its own packages
    if public_key is not None:
        env["PROXIMA_SIGNING_PUBLIC_KEY"] = public_key
    if allow is not None:
        env["PROXIMA_ARTIFACT_URL_ALLOW"] = allow
    agent = AgentProcess(
        data_dir,
        env=env,
        program=program,
        wrapper=wrapper,
        restart_on_failure=restart_on_failure,
    ).start()
    return Host(program, data_dir, state, agent)


@asynccontextmanager
async def console_for(nats: NatsServer, host: Host) -> AsyncIterator[Console]:
    client = await nats.connect()
    console = Console(client, host.state.agent_id)
    await console.start()
    try:
        yield console
    finally:
        await client.close()


async def ready(host: Host, console: Console, version: str) -> None:
    await await_for(
        lambda: version in console.versions(), 20, f"a heartbeat from version {version}"
    )


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    started: list[Host] = []
    try:
        yield started
    finally:
        for host in started:
            host.agent.stop()


def leftovers(host: Host) -> list[str]:
    """Files an update left behind, once the agent has stopped (while it runs, its atomic
    writes briefly show ``.<file>.*.tmp``)."""
    assert host.agent.stop() == 0
    names = {p.name for p in host.program.parent.iterdir()} - {host.program.name}
    names |= {p.name for p in host.data_dir.iterdir() if p.name.startswith(("update", "."))}
    return sorted(names)


# -- the happy path -------------------------------------------------------------------------


async def test_updates_to_the_new_build_reexecs_and_reports_once(
    tmp_path: Path,
    nats_server: NatsServer,
    builds: Builds,
    artifacts: ArtifactServer,
    hosts: list[Host],
) -> None:
    host = install(
        tmp_path, nats_server, builds.old, public_key=builds.public_key, allow=artifacts.url
    )
    hosts.append(host)
    pid = host.agent.process.pid
    async with console_for(nats_server, host) as console:
        await ready(host, console, "0.8.0")
        started = time.monotonic()
        args = builds.new.artifact(artifacts.url)
        await console.send("upd-1", **args)
        await console.send("upd-1", **args)  # the flow retried: must not run twice
        result = await console.result("upd-1")
        took = time.monotonic() - started
        await ready(host, console, "0.9.0")
        # Commands run in order: once the ping answers, any answer to the duplicate is in.
        await console.send("ping-1", kind="ping")
        await console.result("ping-1")
        assert len(console.results_for("upd-1")) == 1
        # Sent again after it finished: the stored result, not a second update.
        await console.send("upd-1", **args)
        await await_for(lambda: len(console.results_for("upd-1")) == 2, what="replay")

    assert result.status is CommandStatus.SUCCEEDED, result
    assert result.detail == {"old_version": "0.8.0", "new_version": "0.9.0"}
    assert console.results_for("upd-1")[1] == result
    assert host.agent.process.pid == pid, "exec keeps the process (and its supervisor) intact"
    assert host.program_version() == "proxima-agent 0.9.0"
    assert host.program.read_bytes() == builds.new.path.read_bytes()
    assert leftovers(host) == [], "backup, marker and temp files are gone"
    assert artifacts.downloads == [builds.new.path.name], "downloaded once"
    _, entries = read_ledger(host.data_dir)
    assert [e.command_id for e in entries] == ["upd-1", "ping-1"]
    versions = console.versions()
    first_new = versions.index("0.9.0")
    assert set(versions[:first_new]) == {"0.8.0"} and set(versions[first_new:]) == {"0.9.0"}, (
        "one process at a time: the trial never heartbeats"
    )
    log = host.agent.log()
    assert "update trial for agent" in log
    assert "self_update complete: 0.8.0 -> 0.9.0" in log
    print(f"self_update 0.8.0 -> 0.9.0: result after {took:.2f}s")


# -- refusals -------------------------------------------------------------------------------


async def test_bad_checksum_and_bad_signature_are_refused(
    tmp_path: Path,
    nats_server: NatsServer,
    builds: Builds,
    artifacts: ArtifactServer,
    hosts: list[Host],
) -> None:
    host = install(
        tmp_path, nats_server, builds.old, public_key=builds.public_key, allow=artifacts.url
    )
    hosts.append(host)
    # The same build signed with a key the agent was not installed with.
    rogue_key, _ = make_signing_key(tmp_path / "rogue")
    rogue = build_agent("0.9.0", tmp_path / "rogue-dist", key=rogue_key)
    assert rogue.sha256 == builds.new.sha256, "builds are reproducible"
    async with console_for(nats_server, host) as console:
        await ready(host, console, "0.8.0")
        wrong_sha = "0" * 64
        await console.send("sha", **builds.new.artifact(artifacts.url, sha256=wrong_sha))
        bad_sha = await console.result("sha")
        await console.send("rogue", **builds.new.artifact(artifacts.url, signature=rogue.signature))
        bad_key = await console.result("rogue")
        # Signed by the fleet key, but for another file.
        await console.send(
            "other", **builds.new.artifact(artifacts.url, signature=builds.old.signature)
        )
        other_file = await console.result("other")
        await console.send(
            "404", **builds.new.artifact(artifacts.url, url=f"{artifacts.url}/x.pyz")
        )
        missing = await console.result("404")
        await console.send("ping", kind="ping")
        assert (await console.result("ping")).detail["version"] == "0.8.0"

    assert bad_sha.status is CommandStatus.FAILED
    assert bad_sha.error == f"sha256 mismatch: expected {wrong_sha} got {builds.new.sha256}"
    assert bad_sha.detail == {"old_version": "0.8.0", "target_version": "0.9.0"}
    for refused in (bad_key, other_file):
        assert refused.status is CommandStatus.FAILED
        assert refused.error == "signature does not verify with the configured signing key"
    assert missing.status is CommandStatus.FAILED
    assert missing.error == f"download {artifacts.url}/x.pyz: HTTP 404 Not Found"
    # The facts the Console judges, as they travel (no English matched across processes).
    kinds = {c: console.raw_result(c)["failure_kind"] for c in ("sha", "rogue", "other", "404")}
    assert kinds == {
        "sha": "checksum_mismatch",
        "rogue": "bad_signature",
        "other": "bad_signature",
        "404": "download_failed",
    }
    assert host.program.read_bytes() == builds.old.path.read_bytes()
    assert leftovers(host) == []


async def test_without_a_signing_key_self_update_is_rejected(
    tmp_path: Path,
    nats_server: NatsServer,
    builds: Builds,
    artifacts: ArtifactServer,
    hosts: list[Host],
) -> None:
    host = install(tmp_path, nats_server, builds.old, public_key=None, allow=artifacts.url)
    hosts.append(host)
    async with console_for(nats_server, host) as console:
        await ready(host, console, "0.8.0")
        await console.send("nokey", **builds.new.artifact(artifacts.url))
        result = await console.result("nokey")
        beat = Heartbeat.model_validate(console.beats.messages[-1])
    assert result.status is CommandStatus.REJECTED
    assert result.error == "no signing public key configured: refusing to install unsigned builds"
    assert beat.can_self_update is False, "declared up front, so rollouts exclude it"
    # The reason is its own fact, not "read-only program path".
    assert console.raw_result("nokey")["failure_kind"] == "no_signing_key"
    assert console.beats.messages[-1]["self_update_blocker"] == "no_signing_key"
    assert artifacts.downloads == []
    assert "self-update not possible (no signing public key configured" in host.agent.log()


def _read_only_wrapper(directory: Path) -> list[str] | None:
    """``unshare -m`` + a read-only bind mount of ``directory``, if this machine allows it."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return None
    script = (
        'mount --make-rprivate / && mount --bind "$0" "$0" && '
        'mount -o remount,bind,ro "$0" && exec "$@"'
    )
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, str(directory), "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return None
    return ["unshare", "-m", "sh", "-c", script, str(directory)]


async def test_a_read_only_program_path_reports_the_real_rename_error(
    tmp_path: Path,
    nats_server: NatsServer,
    builds: Builds,
    artifacts: ArtifactServer,
    hosts: list[Host],
) -> None:
    """The chart page's pod on a read-only image layer: the error text must be the real one."""
    program_dir = tmp_path / "ro-bin"
    program_dir.mkdir()
    wrapper = _read_only_wrapper(program_dir)
    if wrapper is None:
        pytest.skip("no private mount namespace here; see test_agent_selfupdate_units for the seam")
    host = install(
        tmp_path,
        nats_server,
        builds.old,
        public_key=builds.public_key,
        allow=artifacts.url,
        program_dir=program_dir,
        wrapper=wrapper,
    )
    hosts.append(host)
    async with console_for(nats_server, host) as console:
        await ready(host, console, "0.8.0")
        beat = Heartbeat.model_validate(console.beats.messages[-1])
        await console.send("ro", **builds.new.artifact(artifacts.url))
        result = await console.result("ro")
    program = host.program
    assert result.status is CommandStatus.FAILED
    assert result.error == (
        f"backup current binary: rename {program} {program}.bak: read-only file system"
    )
    assert beat.can_self_update is False
    assert console.raw_result("ro")["failure_kind"] == "read_only_program"
    assert beat.self_update_blocker is CommandFailureKind.READ_ONLY_PROGRAM
    assert program.read_bytes() == builds.old.path.read_bytes()
    assert leftovers(host) == []


# -- rollbacks ------------------------------------------------------------------------------


async def test_a_build_that_hangs_at_start_is_killed_and_the_old_one_kept(
    tmp_path: Path,
    nats_server: NatsServer,
    builds: Builds,
    artifacts: ArtifactServer,
    hosts: list[Host],
) -> None:
    """It prints its version, so only the supervised trial can catch it."""
    host = install(
        tmp_path, nats_server, builds.old, public_key=builds.public_key, allow=artifacts.url
    )
    hosts.append(host)
    pid = host.agent.process.pid
    async with console_for(nats_server, host) as console:
        await ready(host, console, "0.8.0")
        await console.send("hang", **builds.hangs.artifact(artifacts.url))
        result = await console.result("hang")
        beats_after = len(console.beats.messages)
        await await_for(lambda: len(console.beats.messages) > beats_after, what="beat")
    assert result.status is CommandStatus.FAILED
    assert result.error == "new version 0.9.1 did not become healthy within 4s; restored 0.8.0"
    assert console.raw_result("hang")["failure_kind"] == "rolled_back"
    assert host.agent.process.pid == pid
    assert set(console.versions()) == {"0.8.0"}
    assert host.program.read_bytes() == builds.old.path.read_bytes()
    assert leftovers(host) == []


async def test_a_build_that_never_connects_after_the_handover_brings_the_old_one_back(
    tmp_path: Path,
    nats_server: NatsServer,
    builds: Builds,
    artifacts: ArtifactServer,
    hosts: list[Host],
) -> None:
    host = install(
        tmp_path, nats_server, builds.old, public_key=builds.public_key, allow=artifacts.url
    )
    hosts.append(host)
    async with console_for(nats_server, host) as console:
        await ready(host, console, "0.8.0")
        await console.send("never", **builds.never_connects.artifact(artifacts.url))
        result = await console.result("never", timeout=40)
        await console.send("ping", kind="ping")
        pong = await console.result("ping")
    assert result.status is CommandStatus.FAILED
    assert result.error == "new version 0.9.2 did not become healthy within 4s; restored 0.8.0"
    assert result.failure_kind is CommandFailureKind.ROLLED_BACK, "reported by the old build"
    assert pong.detail["version"] == "0.8.0"
    assert host.program.read_bytes() == builds.old.path.read_bytes()
    assert "self_update: 0.9.2 took over from 0.8.0" in host.agent.log()
    assert leftovers(host) == []


async def test_a_build_that_crashes_after_the_handover_is_undone_on_restart(
    tmp_path: Path,
    nats_server: NatsServer,
    builds: Builds,
    artifacts: ArtifactServer,
    hosts: list[Host],
) -> None:
    """The service manager restarts the crashed agent: the marker counts the start."""
    host = install(
        tmp_path,
        nats_server,
        builds.old,
        public_key=builds.public_key,
        allow=artifacts.url,
        restart_on_failure=True,
    )
    hosts.append(host)
    async with console_for(nats_server, host) as console:
        await ready(host, console, "0.8.0")
        await console.send("crash", **builds.crashes.artifact(artifacts.url))
        result = await console.result("crash", timeout=40)
        await console.send("ping", kind="ping")
        pong = await console.result("ping")
    assert result.status is CommandStatus.FAILED
    assert result.error == (
        "new version 0.9.3 stopped (crashed or was restarted) before it became healthy; "
        "restored 0.8.0"
    )
    assert result.failure_kind is CommandFailureKind.ROLLED_BACK
    assert pong.detail["version"] == "0.8.0"
    assert host.agent.exits[:1] == [1], "the new build crashed once"
    assert host.program.read_bytes() == builds.old.path.read_bytes()
    assert leftovers(host) == []


def test_version_json_is_what_the_smoke_check_reads(builds: Builds) -> None:
    out = subprocess.run(
        [sys.executable, str(builds.new.path), "version", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env=agent_env(),
    )
    info = json.loads(out.stdout)
    assert info["version"] == "0.9.0"
    assert info["self_update_protocol"] == 1
    assert info["build"]["mode"] == "thin"


def test_a_rollout_from_the_real_console_updates_a_real_agent(
    tmp_path: Path, builds: Builds, agent_processes: list[AgentProcess]
) -> None:
    """The whole path: artifact hosted by the Console, rollout dispatch, JWT-authenticated NATS,
    result ingestion. The Console must see 0.9.0 and no shared identity (the trial's brief
    second connection never heartbeats)."""
    from testkit.console import ConsoleProcess
    from testkit.waiting import wait_for

    console = ConsoleProcess(tmp_path / "console").start()
    try:
        program = tmp_path / "bin" / "proxima-agent"
        program.parent.mkdir()
        shutil.copy2(builds.old.path, program)
        env = agent_env(
            PROXIMA_AGENT_NAME="host-1",
            PROXIMA_BACKEND_URL=console.url,
            PROXIMA_INSTALL_TOKEN=console.install_token(),
            PROXIMA_SIGNING_PUBLIC_KEY=builds.public_key,
            PROXIMA_HEARTBEAT_INTERVAL="300ms",
            PROXIMA_UPDATE_HEALTH_TIMEOUT="20s",
        )
        env.pop("PYTHONPATH", None)
        agent = AgentProcess(tmp_path / "data", env=env, program=program).start()
        agent_processes.append(agent)
        agent.wait_for_log("nats connected to", 30)
        agent_id = json.loads((tmp_path / "data" / "state.json").read_text())["agent_id"]
        with console.client() as c:
            record = wait_for(
                lambda: (
                    (a := c.get(f"/api/v1/fleet/agents/{agent_id}").json())["version"] == "0.8.0"
                    and a
                ),
                timeout=20,
                what="the agent's first heartbeat in the Console",
            )
            assert record["can_self_update"] is True
            uploaded = c.put(
                "/api/v1/artifacts/0.9.0",
                params={"signature": builds.new.signature},
                content=builds.new.path.read_bytes(),
            )
            assert uploaded.status_code == 201, uploaded.text
            created = c.post(
                "/api/v1/fleet/rollouts",
                json={
                    "name": "to 0.9.0",
                    "artifact": uploaded.json(),
                    "selector": {"agent_types": ["host"]},
                    "waves": {"canary_size": 1, "percentages": [100]},
                    "start_flow": False,
                },
            )
            assert created.status_code == 201, created.text
            rollout = created.json()["id"]
            assert c.post(f"/api/v1/fleet/rollouts/{rollout}/start", json={}).status_code == 200
            sent = c.post(f"/api/v1/fleet/rollouts/{rollout}/waves/0/dispatch").json()
            assert sent["sent"] == 1
            target = wait_for(
                lambda: (
                    (t := c.get(f"/api/v1/fleet/rollouts/{rollout}").json()["targets"][0])["status"]
                    not in ("pending", "dispatched")
                    and t
                ),
                timeout=30,
                what="the target's result",
            )
            after = wait_for(
                lambda: (
                    (a := c.get(f"/api/v1/fleet/agents/{agent_id}").json())["version"] == "0.9.0"
                    and a
                ),
                timeout=20,
                what="a 0.9.0 heartbeat in the Console",
            )
        agent.stop()
    finally:
        console.stop()
    assert target["status"] == "succeeded", target
    assert (target["old_version"], target["new_version"]) == ("0.8.0", "0.9.0")
    assert after["flags"] == [], "no shared identity, no other flag"
    assert program.read_bytes() == builds.new.path.read_bytes()
