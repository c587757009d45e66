"""The published image, pulled back by digest and unpacked with umoci, runs as the chart runs
it: UID 65532, a read-only root, only its data directory and /tmp writable; `--help`, then a
real enrollment and heartbeats against a Console from inside the image. A second build gives
the same digest."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

import contracts
from testkit.console import ConsoleFactory
from testkit.release import UID, ImageRun, run_release
from testkit.waiting import wait_for

WRITABLE = {"tmp", "var/lib/proxima-agent"}


def _unpack(pulled: Path, into: Path) -> Path:
    bundle = into / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--image", f"{pulled}:pulled", str(bundle)],
        check=True,
        capture_output=True,
        text=True,
    )
    return bundle


@pytest.fixture(scope="module")
def bundle(pulled: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _unpack(pulled, tmp_path_factory.mktemp("unpacked"))


def _data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, UID, UID)
    data.chmod(0o700)
    return data


def test_the_image_config_is_what_the_chart_assumes(bundle: Path):
    config = json.loads((bundle / "config.json").read_text())
    process = config["process"]
    assert (process["user"]["uid"], process["user"]["gid"]) == (UID, UID)
    assert process["args"] == ["/opt/proxima-agent/bin/proxima-agent", "run"]
    assert process["cwd"] == "/var/lib/proxima-agent"
    env = dict(e.split("=", 1) for e in process["env"])
    assert env["HOME"] == "/tmp" and env["PROXIMA_DATA_DIR"] == "/var/lib/proxima-agent"
    # the chart's `command: ["proxima-agent", "run"]` resolves through PATH
    assert env["PATH"].split(":")[0] == "/opt/proxima-agent/bin"


def test_nothing_but_the_data_directory_and_tmp_is_writable_by_the_agent_user(bundle: Path):
    rootfs = bundle / "rootfs"
    writable = []
    for directory, dirs, files in os.walk(rootfs):
        for name in dirs + files:
            path = Path(directory) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            mode = st.st_mode
            if (
                (st.st_uid == UID and mode & stat.S_IWUSR)
                or (st.st_gid == UID and mode & stat.S_IWGRP)
                or mode & stat.S_IWOTH
            ):
                writable.append(str(path.relative_to(rootfs)))
    assert sorted(writable) == sorted(WRITABLE)
    data = (rootfs / "var/lib/proxima-agent").stat()
    assert (data.st_uid, data.st_gid, stat.S_IMODE(data.st_mode)) == (UID, UID, 0o700)


def test_the_image_holds_debians_python_and_the_pinned_agent_and_no_installer(bundle: Path):
    rootfs = bundle / "rootfs"
    status = (rootfs / "var/lib/dpkg/status").read_text()
    packages = {
        line.split(": ", 1)[1] for line in status.splitlines() if line.startswith("Package: ")
    }
    assert {"python3", "python3.11", "ca-certificates", "libc6"} <= packages
    assert not packages & {"apt", "perl", "usrmerge", "python3-pip"}
    site = next(rootfs.glob("opt/proxima-agent/lib/python3*/site-packages"))
    installed = {p.name.split("-")[0].lower() for p in site.glob("*.dist-info")}
    assert {"proxima_fleet", "pydantic", "nats_py", "kubernetes", "nkeys"} <= installed
    assert "pip" not in installed and not (rootfs / "usr/bin/apt-get").exists()
    pins = (Path(__file__).parents[2] / "docker" / "agent-constraints.txt").read_text()
    for meta in site.glob("*.dist-info"):
        name, version = meta.name.removesuffix(".dist-info").rsplit("-", 1)
        if name != "proxima_fleet":
            assert f"{name.lower().replace('_', '-')}=={version}" in pins, meta.name


def test_the_entrypoint_prints_its_help_as_65532_on_a_read_only_root(bundle: Path, tmp_path):
    run = ImageRun(
        bundle,
        f"help-{os.getpid()}",
        ["/opt/proxima-agent/bin/proxima-agent", "--help"],
        {},
        {"/var/lib/proxima-agent": _data_dir(tmp_path)},
        tmp_path / "help.log",
    ).start()
    try:
        assert run.wait(timeout=60) == 0, run.log()
    finally:
        run.stop()
    assert "run" in run.log() and "Usage" in run.log()


def test_the_agent_in_the_image_enrolls_and_heartbeats_against_a_console(
    bundle: Path, console_factory: ConsoleFactory, tmp_path: Path
):
    console = console_factory()
    token = console.install_token()
    data = _data_dir(tmp_path)
    env = {
        "PROXIMA_BACKEND_URL": console.url,
        "PROXIMA_INSTALL_TOKEN": token,
        "PROXIMA_AGENT_TYPE": "host",
        "PROXIMA_AGENT_NAME": "image-agent",
        "PROXIMA_HEARTBEAT_INTERVAL": "0.5s",
        "PROXIMA_HEALTH_PORT": "0",
        # the read-only root: writing anywhere but /tmp and the data dir fails loudly
    }
    script = (
        "import os\n"
        "for p in ('/opt/proxima-agent/x', '/etc/x', '/usr/x', '/var/tmp/x'):\n"
        "    try:\n        open(p, 'w')\n"
        "    except OSError as e:\n        print('refused', p, e.errno)\n"
        "    else:\n        raise SystemExit('wrote ' + p)\n"
        "print('uid', os.getuid(), os.getgid())\n"
        "os.execv('/opt/proxima-agent/bin/proxima-agent', ['proxima-agent', 'run'])\n"
    )
    agent = ImageRun(
        bundle,
        f"agent-{os.getpid()}",
        ["/opt/proxima-agent/bin/python", "-c", script],
        env,
        {"/var/lib/proxima-agent": data},
        tmp_path / "agent.log",
    )
    agent.start()
    try:
        try:
            wait_for(lambda: (data / "state.json").exists(), timeout=60, what="state.json")
        except Exception as exc:
            raise AssertionError(f"{exc}; the container's log:\n{agent.log()[-2000:]}") from exc
        agent_id = json.loads((data / "state.json").read_text())["agent_id"]
        wait_for(
            lambda: console.agent(agent_id)["status"] == "online",
            timeout=60,
            what="the agent online",
        )
        first = console.agent(agent_id)["last_seen_at"]
        wait_for(
            lambda: console.agent(agent_id)["last_seen_at"] != first,
            timeout=30,
            what="a later heartbeat",
        )
        record = console.agent(agent_id)
        assert record["version"] == contracts.VERSION
        assert f"uid {UID} {UID}" in agent.log()
        assert agent.log().count("refused") == 4
        assert stat.S_IMODE((data / "state.json").stat().st_mode) == 0o600
        assert (data / "state.json").stat().st_uid == UID
    finally:
        agent.stop()


def test_a_second_build_gives_the_same_digest(published: dict[str, Any], tmp_path: Path):
    done = run_release("image", "--out", str(tmp_path / "again"), "--json")
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["digest"] == published["image_digest"]
    first_layers = sorted(
        p.name for p in Path(published["build"]["layout"], "blobs/sha256").iterdir()
    )
    second_layers = sorted(p.name for p in (tmp_path / "again/blobs/sha256").iterdir())
    assert first_layers == second_layers
