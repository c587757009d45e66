"""Clusters: register (onboarding), list, inspect, the onboarding gates, the latest inventory."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.schemas import ClusterCreate, OnboardingChecklist
from console.services import clusters, onboarding
from contracts.bounds import MAX_SQL_INT
from contracts.views import ClusterView

router = APIRouter(prefix="/api/v1/clusters", tags=["clusters"])
_ERRORS = errors(400, 401, 403, 404, 409)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ClusterView, responses=_ERRORS)
async def register(
    body: ClusterCreate, principal: PrincipalDep, runtime: RuntimeDep
) -> ClusterView:
    """Record a cluster (slug derived from the name like the chart does, unless given)."""
    return await clusters.register_cluster(runtime, principal, body)


@router.get("", response_model=list[ClusterView], responses=_ERRORS)
async def list_clusters(principal: PrincipalDep, runtime: RuntimeDep) -> list[ClusterView]:
    return await clusters.list_clusters(runtime, principal)


@router.get("/{slug}", response_model=ClusterView, responses=_ERRORS)
async def get_cluster(slug: str, principal: PrincipalDep, runtime: RuntimeDep) -> ClusterView:
    return await clusters.get_cluster(runtime, principal, slug)


@router.get("/{slug}/onboarding", response_model=OnboardingChecklist, responses=_ERRORS)
async def get_onboarding(
    slug: str, request: Request, principal: PrincipalDep, runtime: RuntimeDep
) -> OnboardingChecklist:
    """The onboarding gates (enrollment, first heartbeat, first inventory sync), each with its
    likely causes while pending, and the cluster's warnings: what the wizard's checklist shows."""
    return await onboarding.cluster_onboarding(
        runtime, principal, slug, backend_url=runtime.backend_url(str(request.base_url))
    )


@router.get("/{slug}/inventory", responses=_ERRORS)
async def inventory(
    slug: str,
    principal: PrincipalDep,
    runtime: RuntimeDep,
    kind: Annotated[str | None, Query(description="one kind, e.g. pods")] = None,
    namespace: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    offset: Annotated[int, Query(ge=0, le=MAX_SQL_INT)] = 0,
) -> dict[str, Any]:
    """The latest snapshot: counts per kind, and objects (one kind at a time, paginated)."""
    return await clusters.inventory(
        runtime, principal, slug, kind=kind, namespace=namespace, limit=limit, offset=offset
    )
