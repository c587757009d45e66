"""Two Console processes on one database (what broke: a build uploaded through replica A answered
404 ``artifact_missing`` on replica B, because builds lived on A's disk)."""

import hashlib
import io

import pytest

from console.services.artifact_blobs import CHUNK_BYTES, store_blob, stream_blob
from testkit.builds import build_agent, suite_signing_key
from testkit.console import ConsoleProcess


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    root = tmp_path_factory.mktemp("replica-build")
    key, _ = suite_signing_key(root / "keys")
    return build_agent("0.9.0", root / "dist", key=key)


@pytest.fixture
def replicas(tmp_path, database_url):
    """Console A and Console B on one database (each with its own data dir and NATS)."""
    a = ConsoleProcess(tmp_path / "replica-a", database_url=database_url)
    a.start()
    b = ConsoleProcess(tmp_path / "replica-b", database_url=database_url)
    b.token = a.token
    try:
        yield a, b.start()
    finally:
        b.stop()
        a.stop()


def test_a_build_uploaded_through_one_console_downloads_from_another(replicas, build):
    a, b = replicas
    with a.client() as c:
        r = c.put(
            "/api/v1/artifacts/0.9.0",
            params={"signature": build.signature},
            content=build.path.read_bytes(),
        )
    assert r.status_code == 201, r.text
    ref = r.json()
    artifact_id = ref["url"].rsplit("/", 2)[-2]
    with b.client() as c:
        assert [x["sha256"] for x in c.get("/api/v1/artifacts").json()] == [ref["sha256"]]
        got = c.get(f"/api/v1/artifacts/{artifact_id}/download")
    assert got.status_code == 200, got.text
    assert got.content == build.path.read_bytes()
    assert hashlib.sha256(got.content).hexdigest() == ref["sha256"] == build.sha256
    assert int(got.headers["content-length"]) == len(got.content)


async def test_a_build_of_many_chunks_streams_back_byte_for_byte(services):
    data = hashlib.sha256(b"chunk").digest() * (CHUNK_BYTES // 32 * 5 // 2 + 7)  # 2.5 MiB + a bit
    sha = hashlib.sha256(data).hexdigest()
    assert await services.run(
        lambda uow: store_blob(uow.session, sha, io.BytesIO(data)), write=True
    )
    assert not await services.run(
        lambda uow: store_blob(uow.session, sha, io.BytesIO(data)), write=True
    ), "stored once"
    parts = [p async for p in stream_blob(services.rt.units, sha, 3)]
    assert [len(p) for p in parts[:2]] == [CHUNK_BYTES, CHUNK_BYTES]
    assert b"".join(parts) == data


def test_migration_0011_imports_the_builds_already_on_disk(tmp_path):
    """Builds hosted before 0011 lived in ``<data_dir>/artifacts/<sha256>``: the migration copies
    each into the database (and leaves out a file whose bytes are not its name)."""
    import asyncio

    from alembic import command
    from sqlmodel import Session

    from console.bootstrap import bootstrap
    from console.core.db import alembic_config, make_engine, migrate
    from console.models import Artifact, ArtifactBlob
    from console.services.unit_of_work import UnitsOfWork

    url = f"sqlite:///{tmp_path / 'console.db'}"
    command.upgrade(alembic_config(url), "0010_fleet_indexes")
    good = b"a build" * 300_000  # 2.1 MB: three 1 MiB chunks
    bad = b"tampered"
    store = tmp_path / "artifacts"
    store.mkdir()
    good_sha, bad_sha = hashlib.sha256(good).hexdigest(), "f" * 64
    (store / good_sha).write_bytes(good)
    (store / bad_sha).write_bytes(bad)
    engine = make_engine(url)
    with Session(engine) as s:
        made = bootstrap(s, client_name="acme", environment_name="prod")
        for version, sha in (("0.9.0", good_sha), ("0.9.1", bad_sha)):
            s.add(
                Artifact(
                    client_id=made.client_id,
                    environment_id=made.environment_id,
                    version=version,
                    url=f"http://console/api/v1/artifacts/{version}/download",
                    sha256=sha,
                    signature="s" * 86,
                    hosted=True,
                )
            )
        s.commit()
    migrate(url, data_dir=tmp_path)
    with Session(engine) as s:
        blob = s.get(ArtifactBlob, good_sha)
        assert blob is not None and blob.size_bytes == len(good) and blob.chunk_count == 3
        assert s.get(ArtifactBlob, bad_sha) is None

    async def read() -> bytes:
        units = UnitsOfWork(engine, serialize_writes=True)
        return b"".join([p async for p in stream_blob(units, good_sha, blob.chunk_count)])

    assert asyncio.run(read()) == good
    engine.dispose()
