"""The Console's HTTP API as the agent uses it: enroll, and prove a rotated credential.

Requests go through a :data:`agent.httpclient.Transport` (a plain function; tests pass one),
run in a worker thread so the event loop never blocks. The default is the standard library's
``urllib``: the agent talks HTTP rarely, and httpx's resident cost outlived enrollment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from agent.credentials import public_key, sign
from agent.errors import BackendAnswerError, BackendUnreachableError
from agent.httpclient import (
    HttpRequest,
    HttpResponse,
    Transport,
    TransportError,
    UrllibTransport,
    retry_after_seconds,
)
from contracts.backoff import honour_retry_after
from contracts.enrollment import (
    EnrollRequest,
    EnrollResponse,
    ErrorBody,
    NatsCredentials,
    NatsCredentialsRequest,
    RotationProof,
    nats_credentials_message,
)

__all__ = ["BackendClient", "EnrollAnswer"]

log = logging.getLogger(__name__)

ENROLL_PATH = "/api/v1/agents/enroll"


def credentials_path(agent_id: str) -> str:
    return f"/api/v1/agents/{agent_id}/credentials"


class EnrollAnswer(BaseModel):
    response: EnrollResponse
    status: int


class BackendClient:
    """One Console base URL. ``transport`` replaces the network for tests.

    A 429 or 503 carrying ``Retry-After`` is asked again after that wait (capped, jittered:
    ``contracts.backoff.honour_retry_after``), at most ``busy_retries`` times per call; after that
    the error carries ``retry_after`` so the caller's own retry loop honours it too."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: Transport | None = None,
        timeout: float = 15.0,
        user_agent: str = "proxima-agent",
        busy_retries: int = 2,
        retry_after_cap: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._transport = transport
        self._timeout = timeout
        self._user_agent = user_agent
        self._busy_retries = busy_retries
        self._retry_after_cap = retry_after_cap
        self._sleep = sleep

    def _send(self) -> Transport:
        if self._transport is None:
            self._transport = UrllibTransport()
        return self._transport

    async def aclose(self) -> None:
        """Nothing is held between calls; kept so callers need not know."""

    async def _post(self, path: str, body: BaseModel) -> tuple[int, Any, float | None]:
        """POST ``body``: status, JSON payload and the ``Retry-After`` of a busy answer. A busy
        answer (429/503 with ``Retry-After``) is asked again after the wait it names,
        ``busy_retries`` times."""
        for attempt in range(self._busy_retries + 1):
            response = await self._post_once(path, body)
            retry_after = retry_after_seconds(response)
            if retry_after is None or attempt == self._busy_retries:
                break
            wait = honour_retry_after(retry_after, 0.0, cap=self._retry_after_cap)
            log.info(
                "backend %s answered %s to %s: retrying in %.1f s as it asked",
                self.base_url,
                response.status,
                path,
                wait,
            )
            await self._sleep(wait)
        try:
            payload = response.json()
        except ValueError:
            payload = None
        return response.status, payload, retry_after

    async def _post_once(self, path: str, body: BaseModel) -> HttpResponse:
        request = HttpRequest(
            "POST",
            self.base_url + path,
            headers={"content-type": "application/json", "user-agent": self._user_agent},
            body=body.model_dump_json().encode(),
            timeout=self._timeout,
        )
        try:
            response = await asyncio.to_thread(self._send(), request)
        except TransportError as e:
            if e.detail == "timed out":
                raise BackendUnreachableError(self.base_url, "timed out", refused=False) from None
            raise BackendUnreachableError(self.base_url, e.detail, refused=e.refused) from None
        return response

    def _answer_error(
        self, status: int, payload: Any, retry_after: float | None = None
    ) -> BackendAnswerError:
        try:
            body = ErrorBody.model_validate(payload)
        except ValidationError:
            detail = payload.get("detail") if isinstance(payload, dict) else None
            return BackendAnswerError(
                self.base_url,
                status,
                f"http_{status}",
                str(detail) if detail else "",
                retry_after=retry_after,
            )
        return BackendAnswerError(
            self.base_url,
            status,
            body.reason,
            body.message,
            body.agent_id,
            retry_after=retry_after,
        )

    async def enroll(self, request: EnrollRequest) -> EnrollAnswer:
        """``POST /api/v1/agents/enroll``; 201 (new) or 200 (re-bound), else an error."""
        status, payload, retry_after = await self._post(ENROLL_PATH, request)
        if status not in (200, 201):
            raise self._answer_error(status, payload, retry_after)
        try:
            response = EnrollResponse.model_validate(payload)
        except ValidationError:
            raise BackendAnswerError(
                self.base_url, status, "bad_response", "the enrollment answer is not understood"
            ) from None
        return EnrollAnswer(response=response, status=status)

    async def rotate_credentials(self, agent_id: str, proof: RotationProof) -> str | None:
        """``POST /api/v1/agents/{id}/credentials``: the Console switches to the new key. Returns
        the NATS user JWT for it (``RotationAccepted.nats_jwt``) when the answer carries one."""
        status, payload, retry_after = await self._post(credentials_path(agent_id), proof)
        if status != 200:
            raise self._answer_error(status, payload, retry_after)
        jwt = payload.get("nats_jwt") if isinstance(payload, dict) else None
        return jwt if isinstance(jwt, str) and jwt else None

    async def nats_credentials(self, agent_id: str, seed: str) -> NatsCredentials:
        """``POST /api/v1/agents/{id}/nats-credentials``: a fresh JWT for the key of ``seed``."""
        signed_at = datetime.now(UTC)
        public = public_key(seed)
        body = NatsCredentialsRequest(
            public_key=public,
            signed_at=signed_at,
            signature=sign(
                seed,
                nats_credentials_message(agent_id=agent_id, public_key=public, signed_at=signed_at),
            ),
        )
        path = f"/api/v1/agents/{agent_id}/nats-credentials"
        status, payload, retry_after = await self._post(path, body)
        if status != 200:
            raise self._answer_error(status, payload, retry_after)
        try:
            return NatsCredentials.model_validate(payload)
        except ValidationError:
            raise BackendAnswerError(
                self.base_url, status, "bad_response", "the credentials answer is not understood"
            ) from None
