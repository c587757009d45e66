"""Starting and resuming Prefect flow runs over Prefect's REST API (no prefect import here:
the Console stays a plain web service; the flows own Prefect).

Every path is built from typed ``UUID``s (a flow run's, a flow's, a deployment's as Prefect
answered it) and the configured deployment name, never from text a caller sent: an id like
``../../admin/settings#`` cannot reach another Prefect route. What Prefect answers is logged
here and reduced to facts (a state type, a status code, accepted or not) before a caller sees
it: an error body of Prefect's is never handed on."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote
from uuid import UUID

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
    """Whether Prefect resumed the run, and ``detail``: the Console's words for its answer
    (its status, never its body)."""

    accepted: bool
    detail: str


@dataclass(frozen=True, slots=True)
class RunOrigin:
    """Which flow a run belongs to and the ``rollout_id`` it was started with (None when it
    has none): what the Console checks before it records a run it did not start."""

    flow_name: str
    rollout_id: str | None


# Prefect's ``StateType`` values: a state outside them is reported as ``UNKNOWN``.
STATE_TYPES = frozenset(
    "SCHEDULED PENDING RUNNING COMPLETED FAILED CANCELLED CANCELLING CRASHED PAUSED".split()
)
_STATE_NAME = re.compile(r"^[A-Za-z][A-Za-z ]{0,31}$")


def _run_state(body: Any) -> RunState:
    state = (body.get("state") if isinstance(body, dict) else None) or {}
    kind = str(state.get("type") or "PENDING")
    name = str(state.get("name") or "")
    return RunState(
        type=kind if kind in STATE_TYPES else "UNKNOWN",
        name=name if _STATE_NAME.match(name) else "",
        message=str(state.get("message") or "")[:512],
    )


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

    async def start_deployment(self, name: str, parameters: dict[str, Any]) -> UUID:
        """Create a flow run of deployment ``flow-name/deployment-name`` (a setting, never a
        caller's text); returns its id."""
        async with self._client() as client:
            path = "/".join(quote(part, safe="") for part in name.split("/", 1))
            r = await self._send(client, "GET", f"/deployments/name/{path}")
            if r.status_code == 404:
                raise PrefectApiError(
                    f"Prefect deployment {name!r} not found: run `prefect deploy --all`", status=404
                )
            _raise_for(r, "reading the deployment")
            deployment_id = _uuid_of(r, "id")
            r = await client.post(
                f"/deployments/{deployment_id}/create_flow_run", json={"parameters": parameters}
            )
            _raise_for(r, "creating a flow run")
            return _uuid_of(r, "id")

    async def flow_run_state(self, flow_run_id: UUID) -> RunState | None:
        """The run's current state; None when Prefect does not know the run (404)."""
        async with self._client() as client:
            r = await self._send(client, "GET", f"/flow_runs/{_checked(flow_run_id)}")
            if r.status_code == 404:
                return None
            _raise_for(r, "reading a flow run")
            return _run_state(_json(r))

    async def flow_run_origin(self, flow_run_id: UUID) -> RunOrigin | None:
        """The run's flow name and ``rollout_id`` parameter; None when Prefect does not know
        the run (404)."""
        async with self._client() as client:
            r = await self._send(client, "GET", f"/flow_runs/{_checked(flow_run_id)}")
            if r.status_code == 404:
                return None
            _raise_for(r, "reading a flow run")
            flow_id = _uuid_of(r, "flow_id")
            parameters = _json(r).get("parameters")
            rollout_id = parameters.get("rollout_id") if isinstance(parameters, dict) else None
            f = await self._send(client, "GET", f"/flows/{flow_id}")
            _raise_for(f, "reading a flow")
            name = _json(f).get("name")
            return RunOrigin(
                flow_name=name if isinstance(name, str) else "",
                rollout_id=rollout_id if isinstance(rollout_id, str) else None,
            )

    async def resume(self, flow_run_id: UUID, run_input: dict[str, Any]) -> ResumeAnswer:
        """Resume a paused flow run with typed input: whether Prefect accepted (Prefect's own
        words are logged, not returned)."""
        async with self._client() as client:
            r = await self._send(
                client,
                "POST",
                f"/flow_runs/{_checked(flow_run_id)}/resume",
                json={"run_input": run_input},
            )
            if r.status_code >= 400:
                log.info(
                    "prefect resume of %s answered %s: %.300s", flow_run_id, r.status_code, r.text
                )
                return ResumeAnswer(False, f"Prefect answered HTTP {r.status_code}")
            body = _json(r)
            status = str(body.get("status"))
            if status != "ACCEPT":
                log.info("prefect resume of %s answered %s: %.300s", flow_run_id, status, r.text)
            return ResumeAnswer(status == "ACCEPT", _RESUME_WORDS.get(status, "an unknown status"))


_RESUME_WORDS = {
    "ACCEPT": "accepted",
    "REJECT": "rejected: the run is not paused",
    "ABORT": "aborted: the run is finished or gone",
    "WAIT": "asked to wait",
}


def _checked(run: UUID) -> UUID:
    """A path segment must be a ``UUID`` (its ``str`` is 36 hex digits and dashes)."""
    if not isinstance(run, UUID):
        raise TypeError(f"a Prefect path takes a UUID, not {type(run).__name__}")
    return run


def _json(r: httpx.Response) -> dict[str, Any]:
    try:
        body = r.json()
    except ValueError:
        raise PrefectApiError(
            "Prefect answered something that is not JSON", status=r.status_code
        ) from None
    if not isinstance(body, dict):
        raise PrefectApiError("Prefect answered an unexpected document", status=r.status_code)
    return body


def _uuid_of(r: httpx.Response, key: str) -> UUID:
    try:
        return UUID(str(_json(r)[key]))
    except (KeyError, ValueError):
        raise PrefectApiError(f"Prefect's answer has no {key} UUID", status=r.status_code) from None


def _raise_for(r: httpx.Response, doing: str) -> None:
    if r.status_code >= 400:
        log.info("prefect answered %s %s: %.300s", r.status_code, doing, r.text)
        raise PrefectApiError(
            f"Prefect answered HTTP {r.status_code} {doing}", status=r.status_code
        )
