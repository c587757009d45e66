"""Artifact uploads and downloads, and the Console's file modes, tried as an attacker would on a
real Console: each attack fails, and data stored before the rules is repaired."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import sqlite3
import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from agent.selfupdate.handler import SelfUpdater
from agent.selfupdate.signatures import SigningPublicKey
from contracts.messages import Command, CommandFailureKind, CommandKind, CommandStatus
from contracts.vocabulary import AgentType
from testkit.builds import (
    SUITE_SIGNING_SEED,
    ArtifactServer,
    Build,
    build_agent,
    make_signing_key,
    suite_public_key,
    suite_signing_key,
)
from testkit.console import ConsoleProcess
from testkit.rollouts import ARTIFACT
from testkit.waiting import wait_for

MIB = 2**20


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Build]:
    """0.8.0 and 0.9.0 signed with the key the test Consoles trust, 0.9.0 with a rogue key."""
    root = tmp_path_factory.mktemp("signed")
    key, _ = suite_signing_key(root / "keys")
    rogue, _ = make_signing_key(root / "rogue")
    return {
        "old": build_agent("0.8.0", root / "dist", key=key),
        "new": build_agent("0.9.0", root / "dist", key=key),
        "rogue": build_agent("0.9.0", root / "rogue-dist", key=rogue, name="rogue-0.9.0"),
    }


def _put(console: ConsoleProcess, version: str, build: Build, signature: str | None = None):
    with console.client() as c:
        return c.put(
            f"/api/v1/artifacts/{version}",
            params={"signature": signature or build.signature},
            content=build.path.read_bytes(),
        )


def _temp_files(console: ConsoleProcess) -> list[str]:
    store = console.data_dir / "artifacts"
    return sorted(p.name for p in store.glob(".upload-*")) if store.exists() else []


def _raw_upload(console: ConsoleProcess, headers: dict[str, str]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", console.port), timeout=10)
    lines = [f"PUT /api/v1/artifacts/0.9.0?signature={'s' * 86} HTTP/1.1", "host: console"]
    headers = {"authorization": f"Bearer {console.token}", **headers}
    lines += [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def _answer(sock: socket.socket) -> str:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


# -- temp files -----------------------------------------------------------------------------


def test_an_aborted_upload_leaves_no_temp_file(console_factory):
    console = console_factory(env={"PROXIMA_ARTIFACT_MAX_BYTES": str(8 * MIB)})
    sock = _raw_upload(
        console, {"content-type": "application/octet-stream", "content-length": str(6 * MIB)}
    )
    sock.sendall(b"x" * (2 * MIB))
    wait_for(lambda: _temp_files(console), what="the upload's temp file, mid-body")
    sock.close()  # the client goes away with 4 MiB still to come
    wait_for(lambda: not _temp_files(console), what="the temp file removed after the abort")
    assert not [p for p in (console.data_dir / "artifacts").iterdir()], "nothing kept"


def test_an_upload_over_the_limit_leaves_no_temp_file(console_factory):
    console = console_factory(env={"PROXIMA_ARTIFACT_MAX_BYTES": str(1 * MIB)})
    # No Content-Length: the limit is found mid-stream, after the temp file was started.
    sock = _raw_upload(
        console, {"content-type": "application/octet-stream", "transfer-encoding": "chunked"}
    )
    chunk = b"x" * 65536
    try:
        for _ in range(3 * 16):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # the Console answered 413 and closed: what we want
    assert " 413 " in _answer(sock).splitlines()[0]
    sock.close()
    wait_for(lambda: not _temp_files(console), what="no temp file after the 413")
    # Declared too large: refused before a byte is read.
    sock = _raw_upload(console, {"content-length": str(2 * MIB)})
    assert " 413 " in _answer(sock).splitlines()[0]
    sock.close()
    assert not _temp_files(console)


# -- the version on the path ----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0.0-" + "a" * 59, "9" * 4301, "latest", "1.0.0_x"])
def test_a_version_outside_the_rule_is_refused(console, signed, version):
    r = _put(console, version, signed["new"])
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "invalid_version"
    assert not _temp_files(console)
    with console.client() as c:
        assert c.get("/api/v1/artifacts").json() == []


def test_a_bad_row_stored_before_the_rule_is_left_out_not_a_500(console_factory, signed):
    console = console_factory()
    assert _put(console, "0.9.0", signed["new"]).status_code == 201
    with console.client() as c:
        env = c.get("/api/v1/artifacts").json()
    database = console.data_dir / "console.db"
    with sqlite3.connect(database) as db:  # what an older Console let in
        client_id, env_id = db.execute("SELECT client_id, environment_id FROM artifact").fetchone()
        db.execute(
            "INSERT INTO artifact (id, client_id, environment_id, version, url, sha256, "
            "signature, hosted, created_at) VALUES (?, ?, ?, ?, 'u', ?, ?, 1, "
            "'2026-01-01 00:00:00')",
            (uuid.uuid4().hex, client_id, env_id, "1." + "0" * 63, "0" * 64, "s" * 86),
        )
    with console.client() as c:
        listed = c.get("/api/v1/artifacts")
        assert listed.status_code == 200, listed.text
        assert listed.json() == env, "the bad row is left out, the good one still listed"


# -- signature and stamped version ----------------------------------------------------------


def test_a_build_not_signed_by_a_trusted_key_is_refused(console, signed):
    r = _put(console, "0.9.0", signed["rogue"])
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "bad_signature"
    r = _put(console, "0.9.0", signed["new"], signature=signed["old"].signature)
    assert r.json()["reason"] == "bad_signature", "a trusted key's signature of another file"
    assert not _temp_files(console)
    assert [p.name for p in (console.data_dir / "artifacts").iterdir()] == []


def test_the_080_build_uploaded_as_095_is_refused(console, signed):
    r = _put(console, "0.9.5", signed["old"])
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "build_version_mismatch"
    assert "'0.8.0'" in r.json()["message"]


def test_a_signed_file_that_is_not_an_agent_build_is_refused(console):
    body = b"#!/bin/sh\necho pwned\n"
    signature = SigningKey(SUITE_SIGNING_SEED).sign(hashlib.sha256(body).digest()).signature
    with console.client() as c:
        r = c.put(
            "/api/v1/artifacts/0.9.0",
            params={"signature": base64.urlsafe_b64encode(signature).decode().rstrip("=")},
            content=body,
        )
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "not_an_agent_build"


def test_a_console_without_signing_keys_hosts_nothing(console_factory, signed):
    console = console_factory(env={"PROXIMA_SIGNING_PUBLIC_KEYS": ""})
    r = _put(console, "0.9.0", signed["new"])
    assert r.status_code == 409, r.text
    assert r.json()["reason"] == "signing_keys_not_configured"


# -- one artifact per build -----------------------------------------------------------------


def test_a_duplicate_upload_answers_the_existing_artifact(console, signed):
    first = _put(console, "0.9.0", signed["new"])
    again = _put(console, "0.9.0", signed["new"])
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()
    with console.client() as c:
        assert c.get("/api/v1/artifacts").json() == [first.json()]


# -- where agents may be sent ---------------------------------------------------------------


def _rollout(console: ConsoleProcess, artifact: dict) -> object:
    with console.client() as c:
        return c.post(
            "/api/v1/fleet/rollouts",
            json={"name": "x", "artifact": artifact, "start_flow": False},
        )


@pytest.mark.parametrize(
    "url",
    [
        "http://attacker.example/agent.pyz",
        "http://127.0.0.1:{port}@attacker.example/api/v1/artifacts/x/download",
        "http://127.0.0.1:{port}/api/v1/artifacts/../../../etc/passwd",
        "http://127.0.0.1:{port}/metrics",
        "file:///etc/shadow",
    ],
)
def test_a_rollout_with_a_foreign_artifact_url_is_refused(console, signed, url):
    hosted = _put(console, "0.9.0", signed["new"]).json()
    r = _rollout(console, {**hosted, "url": url.format(port=console.port)})
    assert r.status_code == 400, r.text
    assert r.json()["reason"] == "artifact_url_not_allowed"
    assert _rollout(console, hosted).status_code == 201, "the hosted build is fine"
    assert _rollout(console, dict(ARTIFACT)).status_code == 201, "an allow-listed prefix too"


def _updater(tmp_path: Path, build: Build, **kwargs) -> SelfUpdater:
    program = tmp_path / "bin" / "proxima-agent"
    program.parent.mkdir(parents=True)
    program.write_bytes(build.path.read_bytes())
    (tmp_path / "data").mkdir()
    return SelfUpdater(
        agent_type=AgentType.HOST,
        version="0.8.0",
        data_dir=tmp_path / "data",
        signing_key=SigningPublicKey.parse(suite_public_key()),
        program=program,
        health_timeout=3.0,
        **kwargs,
    )


def _self_update(artifact: dict) -> Command:
    return Command(
        command_id=uuid.uuid4().hex,
        kind=CommandKind.SELF_UPDATE,
        issued_at=datetime.now(UTC),
        args={"rollout_id": "r", **artifact},
    )


async def test_the_agent_downloads_only_from_its_console_or_its_allow_list(tmp_path, signed):
    """A forged self_update (the Console never sends one now) naming another server: the agent
    refuses before any request; its Console's own URL and an allowed prefix pass that check."""
    server = ArtifactServer(signed["new"].path.parent)
    try:
        own = "http://127.0.0.1:1/api/v1/artifacts/"  # its Console's own artifacts
        updater = _updater(tmp_path, signed["old"], sources=lambda: [own])
        artifact = {
            "version": "0.9.0",
            "url": f"{server.url}/{signed['new'].path.name}",
            "sha256": signed["new"].sha256,
            "signature": signed["new"].signature,
        }
        outcome = await updater.run(_self_update(artifact))
        assert outcome.status is CommandStatus.REJECTED
        assert outcome.failure_kind is CommandFailureKind.ARTIFACT_SOURCE_REFUSED
        assert server.downloads == [], "nothing was fetched"
        # The size cap: refused on Content-Length, before the body, from an allowed server.
        capped = _updater(
            tmp_path / "capped", signed["old"], sources=lambda: [f"{server.url}/"], max_bytes=1024
        )
        outcome = await capped.run(_self_update(artifact))
        assert outcome.status is CommandStatus.FAILED
        assert outcome.failure is not None
        assert "larger than" in outcome.failure.text
    finally:
        server.stop()


# -- files ----------------------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_database_and_builds_are_private(console_factory, signed):
    console = console_factory()  # the default database: <data_dir>/console.db
    hosted = _put(console, "0.9.0", signed["new"])
    assert hosted.status_code == 201
    data = console.data_dir
    assert _mode(data) == 0o700
    assert _mode(data / "console.db") == 0o600
    assert _mode(data / "console.db-wal") == 0o600
    assert _mode(data / "artifacts") == 0o700  # where uploads are checked (temp files)
    assert list((data / "artifacts").iterdir()) == [], "builds live in the database"


def test_an_older_install_is_made_private_at_start(tmp_path, console_factory):
    data = tmp_path / "console"
    data.mkdir(mode=0o755)
    (data / "console.db").touch(mode=0o644)
    (data / "artifacts").mkdir(mode=0o755)
    (data / "artifacts" / ("0" * 64)).write_bytes(b"old build")
    (data / "artifacts" / ("0" * 64)).chmod(0o644)
    console_factory()
    assert _mode(data) == 0o700
    assert _mode(data / "console.db") == 0o600
    assert _mode(data / "artifacts") == 0o700
    assert _mode(data / "artifacts" / ("0" * 64)) == 0o600


def test_the_embedded_nats_server_has_no_monitoring_port(console_factory):
    console = console_factory()
    conf = (console.data_dir / "nats" / "nats-server.conf").read_text()
    assert "http" not in conf
    ports = json.loads(next((console.data_dir / "nats" / "ports").glob("*.ports")).read_text())
    assert ports.get("monitoring") is None
    assert ports["nats"], "the client port is there"


def test_migration_0008_repairs_bad_and_duplicate_rows(tmp_path):
    """Data an older Console stored: a 65-character version and the same build twice. The
    migration removes the bad row and the younger duplicate, then makes duplicates impossible."""
    from alembic import command

    from console.core.db import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0006")
    rows = [
        ("a" * 32, "0.9.0", "1" * 64, "2026-01-01 00:00:00"),
        ("b" * 32, "0.9.0", "1" * 64, "2026-01-02 00:00:00"),  # the same build again
        ("c" * 32, "1." + "0" * 63, "2" * 64, "2026-01-03 00:00:00"),  # 65 characters
        ("d" * 32, "0.9.1", "3" * 64, "2026-01-04 00:00:00"),
    ]
    with sqlite3.connect(tmp_path / "old.db") as db:
        db.execute("INSERT INTO client (id, name, created_at) VALUES ('c1', 'acme', '2026-01-01')")
        db.execute(
            "INSERT INTO environment (id, client_id, name, created_at) "
            "VALUES ('e1', 'c1', 'prod', '2026-01-01')"
        )
        for row_id, version, sha, created in rows:
            db.execute(
                "INSERT INTO artifact (id, client_id, environment_id, version, url, sha256, "
                "signature, hosted, created_at) VALUES (?, 'c1', 'e1', ?, 'u', ?, 's', 1, ?)",
                (row_id, version, sha, created),
            )
    command.upgrade(alembic_config(url), "head")
    with sqlite3.connect(tmp_path / "old.db") as db:
        kept = [r[0] for r in db.execute("SELECT id FROM artifact ORDER BY created_at")]
        assert kept == ["a" * 32, "d" * 32]
        with pytest.raises(sqlite3.IntegrityError):
            db.execute(
                "INSERT INTO artifact (id, client_id, environment_id, version, url, sha256, "
                "signature, hosted, created_at) VALUES ('e', 'c1', 'e1', '0.9.0', 'u', ?, 's', "
                "1, '2026-01-05')",
                ("1" * 64,),
            )
