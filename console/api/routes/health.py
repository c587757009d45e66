"""Health: ``/livez`` (the process answers), ``/readyz`` (the database and NATS are reachable,
with detail; 503 when either is not) and ``/healthz`` (kept for older probes: the liveness
answer with the version and NATS URL, plus the same detail — always 200)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from console.api.deps import RuntimeDep
from contracts import VERSION
from contracts.vocabulary import ErrorReason

router = APIRouter(tags=["health"])


@router.get("/livez")
async def livez() -> dict[str, str]:
    """The process is up and serving; says nothing about its dependencies (restart on failure
    only, never on an outage of the database or NATS)."""
    return {"status": "ok", "version": VERSION}


@router.get(
    "/readyz",
    responses={503: {"description": "The database or NATS is unreachable (detail per check)"}},
)
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Checks the database (a query now) and the Console's NATS connection."""
    checks = await runtime.readiness()
    if all(check["ok"] for check in checks.values()):
        return JSONResponse({"status": "ok", "checks": checks})
    down = [name for name, check in checks.items() if not check["ok"]]
    reason = (
        ErrorReason.DATABASE_UNAVAILABLE if "database" in down else ErrorReason.NATS_UNAVAILABLE
    )
    body: dict[str, Any] = {
        "status": "unavailable",
        "reason": reason,
        "message": " and ".join(down) + " unavailable",
        "checks": checks,
    }
    return JSONResponse(body, status_code=503)


@router.get("/healthz")
async def healthz(runtime: RuntimeDep) -> dict[str, Any]:
    """Compatible with older probes (200 while the process serves); ``ready`` and ``checks``
    tell the truth about the dependencies without failing the probe."""
    checks = {dep.name: {"ok": dep.up} for dep in (runtime.units.database, runtime.nats)}
    return {
        "status": "ok",
        "version": VERSION,
        "nats": runtime.nats_url,
        "ready": all(c["ok"] for c in checks.values()),
        "checks": checks,
    }
