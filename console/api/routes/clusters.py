"""Clusters: register (onboarding), list, inspect, read the latest inventory."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, status
from sqlmodel import Session, col, select

from console import clusters as svc
from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.models import Cluster, ClusterInventory
from console.schemas import Scope

router = APIRouter(prefix="/api/v1/clusters", tags=["clusters"])
_ERRORS = errors(400, 401, 403, 404, 409)


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=svc.ClusterPublic, responses=_ERRORS
)
def register(
    body: svc.ClusterCreate, principal: PrincipalDep, runtime: RuntimeDep
) -> svc.ClusterPublic:
    """Record a cluster (slug derived from the name like the chart does, unless given)."""
    principal.require(Scope.CLUSTERS_WRITE)
    with Session(runtime.engine, expire_on_commit=False) as session:
        cluster = svc.register(
            session,
            client_id=principal.client_id,
            environment_id=principal.environment_id,
            body=body,
        )
        session.commit()
        return svc.public(
            session, cluster, backend_sync_interval=runtime.settings.k8s_sync_interval
        )


@router.get("", response_model=list[svc.ClusterPublic], responses=_ERRORS)
def list_clusters(principal: PrincipalDep, runtime: RuntimeDep) -> list[svc.ClusterPublic]:
    principal.require(Scope.CLUSTERS_READ)
    with Session(runtime.engine) as session:
        rows = session.exec(
            select(Cluster)
            .where(
                Cluster.environment_id == principal.environment_id,
                Cluster.client_id == principal.client_id,
            )
            .order_by(col(Cluster.slug))
        ).all()
        return [
            svc.public(session, c, backend_sync_interval=runtime.settings.k8s_sync_interval)
            for c in rows
        ]


@router.get("/{slug}", response_model=svc.ClusterPublic, responses=_ERRORS)
def get_cluster(slug: str, principal: PrincipalDep, runtime: RuntimeDep) -> svc.ClusterPublic:
    principal.require(Scope.CLUSTERS_READ)
    with Session(runtime.engine) as session:
        cluster = svc.load(session, principal.environment_id, slug)
        return svc.public(
            session, cluster, backend_sync_interval=runtime.settings.k8s_sync_interval
        )


@router.get("/{slug}/inventory", responses=_ERRORS)
def inventory(
    slug: str,
    principal: PrincipalDep,
    runtime: RuntimeDep,
    kind: Annotated[str | None, Query(description="one kind, e.g. pods")] = None,
    namespace: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    """The latest snapshot: counts per kind, and objects (one kind at a time, paginated)."""
    principal.require(Scope.CLUSTERS_READ)
    with Session(runtime.engine) as session:
        cluster = svc.load(session, principal.environment_id, slug)
        inv = session.get(ClusterInventory, cluster.id)
    if inv is None:
        return {"slug": slug, "collected_at": None, "counts": {}, "items": [], "total": 0}
    body: dict[str, Any] = {
        "slug": slug,
        "collected_at": inv.collected_at,
        "counts": cluster.counts,
        "truncated": cluster.truncated,
        "errors": cluster.errors,
        "kinds": sorted(inv.objects),
    }
    if kind:
        items = inv.objects.get(kind, [])
        if namespace:
            items = [o for o in items if o.get("namespace") == namespace]
        body.update(
            kind=kind,
            total=len(items),
            items=items[offset : offset + limit],
            limit=limit,
            offset=offset,
        )
    return body
