"""Two Console processes on one database (issue 15: a build uploaded through replica A answered
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
    data = hashlib.sha256(b"seed").digest() * (CHUNK_BYTES // 32 * 5 // 2 + 7)  # 2.5 MiB + a bit
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
