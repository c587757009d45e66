"""Starting and resuming Prefect flow runs over Prefect's REST API (no prefect import here:
the Console stays a plain web service; the flows own Prefect)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import httpx

from contracts.backoff import Backoff

log = logging.getLogger(__name__)

# Prefect's own server answers 5xx while its database is busy (SQLite "database is locked" as a
# flow writes its pause): such an answer is tried again, as Prefect's own client does
# (PREFECT_CLIENT_MAX_RETRIES), before it is reported. Connection errors are tried again by
# the transport (they fail before anything is sent). Reads and resumes are tried again (a
# resume of a run no longer paused is refused by Prefect, not applied twice); creating a flow
# run is not, since a 5xx may come after the run was made.
RETRY_STATUSES = frozenset({500, 502, 503, 504})
RETRIES = 3
RETRY_BACKOFF = Backoff(initial=0.2, maximum=1.0, multiplier=2.5, jitter=0.0)  # 0.2, 0.5, 1 s


class PrefectApiError(RuntimeError):
    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class RunState:
    """A flow run's state as Prefect reports it: ``type`` is Prefect's ``StateType``."""

    type: str
    name: str
    message: str


@dataclass(frozen=True, slots=True)
class ResumeAnswer:
    accepted: bool
    detail: str


class PrefectApi:
    def __init__(self, api_url: str, *, timeout: float = 10.0) -> None:
        self.api_url = api_url.rstrip("/")
        self._timeout = timeout

    def _client(self) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(retries=2)
        return httpx.AsyncClient(base_url=self.api_url, timeout=self._timeout, transport=transport)

    @staticmethod
    async def _send(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
        for attempt in range(RETRIES + 1):
            r = await client.request(method, url, **kw)
            if r.status_code not in RETRY_STATUSES or attempt == RETRIES:
                return r
            log.info("prefect answered %s to %s %s: trying again", r.status_code, method, url)
            await asyncio.sleep(RETRY_BACKOFF.delay(attempt))
        raise AssertionError("unreachable")

    async def start_deployment(self, name: str, parameters: dict[str, Any]) -> str:
        """Create a flow run of deployment ``flow-name/deployment-name``; returns its id."""
        async with self._client() as client:
            r = await self._send(client, "GET", f"/deployments/name/{name}")
            if r.status_code == 404:
                raise PrefectApiError(
                    f"Prefect deployment {name!r} not found: run `prefect deploy --all`", status=404
                )
            r.raise_for_status()
            deployment_id = r.json()["id"]
            r = await client.post(
                f"/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters}
            )
            r.raise_for_status()
            return str(r.json()["id"])

    async def flow_run_state(self, flow_run_id: str) -> RunState | None:
        """The run's current state; None when Prefect does not know the run (404)."""
        async with self._client() as client:
            r = await self._send(client, "GET", f"/flow_runs/{flow_run_id}")
            if r.status_code in (404, 422):  # 422: not even a UUID
                return None
            if r.status_code >= 400:
                raise PrefectApiError(f"Prefect answered {r.status_code}", status=r.status_code)
            state = r.json().get("state") or {}
            return RunState(
                type=str(state.get("type") or "PENDING"),
                name=str(state.get("name") or ""),
                message=str(state.get("message") or "")[:512],
            )

    async def resume(self, flow_run_id: str, run_input: dict[str, Any]) -> ResumeAnswer:
        """Resume a paused flow run with typed input: whether Prefect accepted, and its word."""
        async with self._client() as client:
            r = await self._send(
                client, "POST", f"/flow_runs/{flow_run_id}/resume", json={"run_input": run_input}
            )
            if r.status_code >= 400:
                log.info("prefect resume of %s answered %s: %s", flow_run_id, r.status_code, r.text)
                return ResumeAnswer(False, f"Prefect answered {r.status_code}: {r.text[:300]}")
            body = r.json()
            status = str(body.get("status"))
            reason = str((body.get("details") or {}).get("reason") or status)
            return ResumeAnswer(status == "ACCEPT", reason[:300])
