"""A typed client of the Console API for the flows (the flows never import the Console).

Every method answers a model of :mod:`contracts` (``contracts.views`` for agents, clusters,
onboarding, settings and identity releases; ``contracts.rollouts`` and ``contracts.audit`` for
the rest): no Console JSON reaches flow code as a dict. A 4xx/5xx raises
:class:`ConsoleApiError`, whose ``reason`` is an :class:`~contracts.vocabulary.ErrorReason`
(or the text of a reason this build does not know).
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import TypeAdapter

from contracts.audit import AuditRunCreate, AuditRunPublic
from contracts.enrollment import ErrorBody
from contracts.rollouts import ArtifactRef, DispatchResult, RolloutCreate, RolloutPublic
from contracts.views import (
    MAX_LIST_PAGE,
    AgentDetailView,
    AgentFilter,
    AgentPage,
    AgentView,
    ClusterView,
    ConsoleSettingsView,
    CredentialRotation,
    OnboardingStatus,
    ReleaseDecision,
)
from contracts.vocabulary import ErrorReason, ReleaseOutcome
from contracts.vocabulary.reasons import RELEASE_REFUSALS
from flows.reasons import parse_reason
from flows.settings import FlowSettings
from rollout_policy import EventKind

__all__ = ["DECISIONS", "ConsoleApiError", "ConsoleClient"]

DECISIONS = frozenset({EventKind.PAUSE, EventKind.RESUME, EventKind.ABORT, EventKind.COMPLETE})
"""The rollout events the Console serves at ``POST /api/v1/fleet/rollouts/{id}/{event}``."""
_WITH_REASON = frozenset({EventKind.PAUSE, EventKind.ABORT})

_PUBLISHED_NAMES = {
    "quiet_window_seconds": "identity_quiet_seconds",
    "stale_after_seconds": "agent_stale_seconds",
    "k8s_sync_interval_seconds": "k8s_sync_interval_seconds",
    "rotation_timeout_seconds": "rotation_timeout_seconds",
}
"""``ConsoleSettingsView`` field → the name a Console publishing its settings' own names uses."""

_CLUSTERS = TypeAdapter(list[ClusterView])
_ROLLOUTS = TypeAdapter(list[RolloutPublic])
_ARTIFACTS = TypeAdapter(list[ArtifactRef])
_AUDIT_RUNS = TypeAdapter(list[AuditRunPublic])


class ConsoleApiError(RuntimeError):
    """A 4xx/5xx from the Console, with its machine reason."""

    def __init__(self, status: int, reason: ErrorReason | str, message: str) -> None:
        super().__init__(f"console answered {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class ConsoleUnavailable(ConsoleApiError):
    """502, 503 or 504: the Console (or what is in front of it) cannot answer now; asking again
    later may succeed."""


_UNAVAILABLE = frozenset({502, 503, 504})


class ConsoleClient:
    def __init__(self, settings: FlowSettings, *, transport: httpx.BaseTransport | None = None):
        headers = {}
        token = settings.console_token.get_secret_value()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=settings.console_url,
            headers=headers,
            timeout=settings.console_timeout_seconds,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ConsoleClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self._http.request(method, path, **kwargs)
        if r.status_code >= 400:
            error = ConsoleUnavailable if r.status_code in _UNAVAILABLE else ConsoleApiError
            try:
                body = ErrorBody.model_validate(r.json())
            except ValueError:
                raise error(r.status_code, "error", r.text) from None
            raise error(r.status_code, parse_reason(body.reason), body.message)
        return r.json()

    # rollouts -------------------------------------------------------------------------------
    def create_rollout(self, body: RolloutCreate) -> RolloutPublic:
        return RolloutPublic.model_validate(
            self._call("POST", "/api/v1/fleet/rollouts", json=body.model_dump(mode="json"))
        )

    def rollout(
        self, rollout_id: str, *, targets: bool = True, wave: int | None = None
    ) -> RolloutPublic:
        """The rollout with its counts; ``targets`` adds the per-agent results (of ``wave``
        only, when given)."""
        params: dict[str, str | int] = {"targets": str(targets).lower()}
        if wave is not None:
            params["wave"] = wave
        return RolloutPublic.model_validate(
            self._call("GET", f"/api/v1/fleet/rollouts/{rollout_id}", params=params)
        )

    def rollouts(self, limit: int = 20) -> list[RolloutPublic]:
        return _ROLLOUTS.validate_python(
            self._call("GET", "/api/v1/fleet/rollouts", params={"limit": limit})
        )

    def start(self, rollout_id: str, flow_run_id: str | None) -> RolloutPublic:
        return RolloutPublic.model_validate(
            self._call(
                "POST",
                f"/api/v1/fleet/rollouts/{rollout_id}/start",
                json={"flow_run_id": flow_run_id},
            )
        )

    def dispatch(self, rollout_id: str, wave: int) -> DispatchResult:
        return DispatchResult.model_validate(
            self._call("POST", f"/api/v1/fleet/rollouts/{rollout_id}/waves/{wave}/dispatch")
        )

    def decide(
        self, rollout_id: str, action: EventKind, reason: str | None = None
    ) -> RolloutPublic:
        if action not in DECISIONS:
            raise ValueError(f"the Console takes no {action!r} decision")
        body = {"reason": reason} if action in _WITH_REASON else None
        return RolloutPublic.model_validate(
            self._call("POST", f"/api/v1/fleet/rollouts/{rollout_id}/{action.value}", json=body)
        )

    def restart_driver(self, rollout_id: str) -> RolloutPublic:
        """A fresh ``fleet-rollout`` flow run for a rollout whose run is gone (409
        ``driver_running`` while the recorded one is alive)."""
        return RolloutPublic.model_validate(
            self._call("POST", f"/api/v1/fleet/rollouts/{rollout_id}/restart-driver")
        )

    # fleet ----------------------------------------------------------------------------------
    def agents(self, filters: AgentFilter | None = None) -> list[AgentView]:
        """Every agent matching ``filters``, paging through the list (its page is ignored)."""
        asked = (filters or AgentFilter()).model_copy(update={"limit": MAX_LIST_PAGE})
        items: list[AgentView] = []
        offset = 0
        while True:
            page = AgentPage.model_validate(
                self._call(
                    "GET",
                    "/api/v1/fleet/agents",
                    params=asked.model_copy(update={"offset": offset}).query(),
                )
            )
            items.extend(page.items)
            offset += len(page.items)
            if not page.items or (not page.total_capped and offset >= page.total):
                return items  # a capped total only says "more than": read on to an empty page

    def agent(self, agent_id: str) -> AgentDetailView:
        return AgentDetailView.model_validate(self._call("GET", f"/api/v1/fleet/agents/{agent_id}"))

    def release_identity(self, agent_id: str, *, dry_run: bool = False) -> ReleaseDecision:
        """What release-identity did with the record or, with ``dry_run``, would do: the
        Console decides both alike. A refusal (``agent_revoked``, ``agent_recently_seen``) is
        an answer here (``outcome`` ``refused`` with its reason), not an error; anything else
        the Console refuses (404, 403, …) raises :class:`ConsoleApiError`."""
        try:
            body = self._call(
                "POST",
                f"/api/v1/fleet/agents/{agent_id}/release-identity",
                params={"dry_run": "true"} if dry_run else None,
            )
        except ConsoleApiError as exc:
            if exc.status != 409 or exc.reason not in RELEASE_REFUSALS:
                raise
            return ReleaseDecision(
                agent_id=agent_id,
                outcome=ReleaseOutcome.REFUSED,
                reason=ErrorReason(exc.reason),
                message=exc.message,
                dry_run=dry_run,
            )
        if "outcome" in body:
            return ReleaseDecision.model_validate(body)
        # A Console that answers the record as it is (or would be) once released.
        record = AgentView.model_validate(body)
        outcome = ReleaseOutcome.WOULD_RELEASE if dry_run else ReleaseOutcome.RELEASED
        return ReleaseDecision(agent_id=record.id, outcome=outcome, dry_run=dry_run)

    def revoke(self, agent_id: str) -> AgentView:
        """Revoke the identity: the Console cuts its connection and never re-binds it."""
        return AgentView.model_validate(
            self._call("POST", f"/api/v1/fleet/agents/{agent_id}/revoke")
        )

    def rotate_credentials(self, agent_id: str) -> CredentialRotation:
        """Ask the online agent for a new key and wait until it lands (504 when it does not)."""
        return CredentialRotation.model_validate(
            self._call("POST", f"/api/v1/fleet/agents/{agent_id}/rotate-credentials")
        )

    def settings(self) -> ConsoleSettingsView:
        """The Console's windows (quiet window, stale timeout, …): read here, never copied."""
        body = self._call("GET", "/api/v1/settings")
        if "quiet_window_seconds" not in body:
            # A Console that publishes its own setting names (PublishedSettings).
            body = {view: body[name] for view, name in _PUBLISHED_NAMES.items() if name in body}
        return ConsoleSettingsView.model_validate(body)

    # builds -------------------------------------------------------------------------------
    def artifacts(self) -> list[ArtifactRef]:
        """The builds this Console hosts, newest first."""
        return _ARTIFACTS.validate_python(self._call("GET", "/api/v1/artifacts"))

    def upload_artifact(self, version: str, signature: str, content: bytes) -> ArtifactRef:
        """Host a signed build (the same build again answers the artifact already there)."""
        return ArtifactRef.model_validate(
            self._call(
                "PUT",
                f"/api/v1/artifacts/{version}",
                params={"signature": signature},
                content=content,
                headers={"content-type": "application/octet-stream"},
            )
        )

    # clusters -------------------------------------------------------------------------------
    def clusters(self) -> list[ClusterView]:
        return _CLUSTERS.validate_python(self._call("GET", "/api/v1/clusters"))

    def cluster(self, slug: str) -> ClusterView:
        return ClusterView.model_validate(self._call("GET", f"/api/v1/clusters/{slug}"))

    def onboarding(self, slug: str) -> OnboardingStatus:
        """The onboarding gates of one cluster, as the Console (and its wizard) judges them."""
        return OnboardingStatus.model_validate(
            self._call("GET", f"/api/v1/clusters/{slug}/onboarding")
        )

    # audit ----------------------------------------------------------------------------------
    def post_audit(self, body: AuditRunCreate) -> AuditRunPublic:
        return AuditRunPublic.model_validate(
            self._call("POST", "/api/v1/audit/runs", json=body.model_dump(mode="json"))
        )

    def audit_runs(self, limit: int = 20) -> list[AuditRunPublic]:
        """The newest audit runs, without their findings."""
        return _AUDIT_RUNS.validate_python(
            self._call("GET", "/api/v1/audit/runs", params={"limit": limit})
        )

    def audit_run(self, run_id: str) -> AuditRunPublic:
        """One audit run with its findings."""
        return AuditRunPublic.model_validate(self._call("GET", f"/api/v1/audit/runs/{run_id}"))

    def latest_audit(self) -> AuditRunPublic:
        """The newest fleet-audit run with its findings (404 ``no_audit`` before the first)."""
        return AuditRunPublic.model_validate(self._call("GET", "/api/v1/audit/runs/latest"))
