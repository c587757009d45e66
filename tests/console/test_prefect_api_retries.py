"""The Console's calls to Prefect's REST API ride out a busy Prefect (found in the rollout e2e
test: Prefect's SQLite was locked as the flow wrote its pause, the resume got a 5xx, and the
Console answered "resume refused" for a run Prefect would have resumed a moment later).

A real HTTP server on loopback answers as a busy Prefect does, then as a well one.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from console.prefect_api import RETRIES, PrefectApi
from testkit.net import LoopbackHTTPServer, send_json

#: Prefect's ids are UUIDs, and the Console builds its paths from nothing else.
RUN = uuid.UUID(int=1)
DEPLOYMENT = uuid.UUID(int=2)


class BusyPrefect:
    """Answers the first ``busy`` requests of each path with 503, then as Prefect would."""

    def __init__(self, busy: int) -> None:
        self.busy = busy
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _answer(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                with outer._lock:
                    outer.seen.append((method, self.path))
                    tries = sum(1 for m, p in outer.seen if (m, p) == (method, self.path))
                body: dict[str, object]
                if tries <= outer.busy:
                    status, body = 503, {"detail": "database is locked"}
                elif self.path.endswith("/resume"):
                    status, body = 200, {"status": "ACCEPT", "details": {}}
                elif self.path.startswith("/deployments/name/"):
                    status, body = 200, {"id": str(DEPLOYMENT)}
                elif self.path.endswith("/create_flow_run"):
                    status, body = 201, {"id": str(RUN)}
                else:
                    status, body = 200, {"state": {"type": "PAUSED", "name": "Suspended"}}
                send_json(self, status, body)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

        return Handler


@pytest.fixture
def busy_prefect(request: pytest.FixtureRequest) -> Iterator[tuple[BusyPrefect, str]]:
    prefect = BusyPrefect(busy=request.param)
    server = LoopbackHTTPServer(prefect.handler())
    try:
        yield prefect, server.url
    finally:
        server.stop()


@pytest.mark.parametrize("busy_prefect", [RETRIES], indirect=True)
async def test_a_resume_and_a_read_answered_5xx_are_tried_again(
    busy_prefect: tuple[BusyPrefect, str],
) -> None:
    prefect, url = busy_prefect
    answer = await PrefectApi(url).resume(RUN, {"decision": "resume"})
    assert answer.accepted, answer
    state = await PrefectApi(url).flow_run_state(RUN)
    assert state is not None and state.type == "PAUSED"
    assert prefect.seen.count(("POST", f"/flow_runs/{RUN}/resume")) == RETRIES + 1


@pytest.mark.parametrize("busy_prefect", [RETRIES + 1], indirect=True)
async def test_a_prefect_busy_for_longer_is_reported_not_waited_on_for_ever(
    busy_prefect: tuple[BusyPrefect, str],
) -> None:
    prefect, url = busy_prefect
    answer = await PrefectApi(url).resume(RUN, {"decision": "resume"})
    assert not answer.accepted and "503" in answer.detail
    assert prefect.seen.count(("POST", f"/flow_runs/{RUN}/resume")) == RETRIES + 1


@pytest.mark.parametrize("busy_prefect", [1], indirect=True)
async def test_creating_a_flow_run_is_never_sent_twice(
    busy_prefect: tuple[BusyPrefect, str],
) -> None:
    """A 5xx may come after Prefect made the run: a second POST could make two."""
    prefect, url = busy_prefect
    with pytest.raises(Exception, match="503"):
        await PrefectApi(url).start_deployment("fleet-rollout/fleet-rollout", {})
    assert prefect.seen.count(("GET", "/deployments/name/fleet-rollout/fleet-rollout")) == 2
    assert prefect.seen.count(("POST", f"/deployments/{DEPLOYMENT}/create_flow_run")) == 1
