"""A typed client of the Console API for the flows (the flows never import the Console)."""

from __future__ import annotations

from typing import Any, Literal

import httpx

from contracts.audit import AuditRunCreate, AuditRunPublic
from contracts.rollouts import DispatchResult, RolloutCreate, RolloutPublic
from flows.settings import FlowSettings

RolloutAction = Literal["pause", "resume", "abort", "complete"]
"""The rollout decisions the Console serves at ``POST /api/v1/fleet/rollouts/{id}/{action}``."""


class ConsoleApiError(RuntimeError):
    """A 4xx/5xx from the Console, with its machine reason."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"console answered {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


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
            try:
                body = r.json()
                raise ConsoleApiError(
                    r.status_code, body.get("reason", "error"), body.get("message", r.text)
                )
            except ValueError:
                raise ConsoleApiError(r.status_code, "error", r.text) from None
        return r.json()

    # rollouts -------------------------------------------------------------------------------
    def create_rollout(self, body: RolloutCreate) -> RolloutPublic:
        return RolloutPublic.model_validate(
            self._call("POST", "/api/v1/fleet/rollouts", json=body.model_dump(mode="json"))
        )

    def rollout(self, rollout_id: str, *, targets: bool = True) -> RolloutPublic:
        return RolloutPublic.model_validate(
            self._call(
                "GET",
                f"/api/v1/fleet/rollouts/{rollout_id}",
                params={"targets": str(targets).lower()},
            )
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
        self, rollout_id: str, action: RolloutAction, reason: str | None = None
    ) -> RolloutPublic:
        body = {"reason": reason} if action in ("pause", "abort") else None
        return RolloutPublic.model_validate(
            self._call("POST", f"/api/v1/fleet/rollouts/{rollout_id}/{action}", json=body)
        )

    # fleet ----------------------------------------------------------------------------------
    def agents(self, **filters: Any) -> list[dict[str, Any]]:
        """Every agent matching ``filters`` (pages through the list)."""
        items: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = self._call(
                "GET", "/api/v1/fleet/agents", params={**filters, "limit": 1000, "offset": offset}
            )
            items.extend(page["items"])
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                return items

    def agent(self, agent_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/fleet/agents/{agent_id}"))

    def release_identity(self, agent_id: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/api/v1/fleet/agents/{agent_id}/release-identity"))

    def clusters(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/v1/clusters"))

    def cluster(self, slug: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/api/v1/clusters/{slug}"))

    def rollouts(self, limit: int = 20) -> list[RolloutPublic]:
        return [
            RolloutPublic.model_validate(r)
            for r in self._call("GET", "/api/v1/fleet/rollouts", params={"limit": limit})
        ]

    def post_audit(self, body: AuditRunCreate) -> AuditRunPublic:
        return AuditRunPublic.model_validate(
            self._call("POST", "/api/v1/audit/runs", json=body.model_dump(mode="json"))
        )
