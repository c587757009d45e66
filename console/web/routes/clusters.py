"""Clusters: the list, one cluster, and onboarding (/clusters/add) with its live checklist."""

from __future__ import annotations

import unicodedata
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from console.core.clock import utcnow
from console.core.settings import public_url_warning
from console.errors import BadRequestError, ConflictError
from console.runtime import ConsoleRuntime
from console.schemas import ClusterCreate, InstallTokenCreate
from console.services import clusters, onboarding, tokens
from console.web.deps import FormDep, RuntimeDep, Viewer, ViewerDep, get_web
from console.web.install_commands import (
    HOST_AGENT_DATA_DIR,
    TOKEN_PLACEHOLDER,
    InstallPlan,
)
from console.web.routing import PageRoute
from contracts import VERSION
from contracts.durations import format_duration, parse_duration
from contracts.slugs import MAX_SLUG, is_dns_label, slugify
from contracts.vocabulary import Scope

router = APIRouter(route_class=PageRoute, include_in_schema=False)

MAX_NAME = 253
TOKEN_LIFETIMES = {
    "": ("never expires", None),
    "1d": ("1 day", 86400),
    "7d": ("7 days", 7 * 86400),
    "30d": ("30 days", 30 * 86400),
}


def backend_url(request: Request, runtime: ConsoleRuntime) -> str:
    """What agents should use: PROXIMA_PUBLIC_URL, else the address this page was asked on."""
    return runtime.backend_url(str(request.base_url))


def _reveal_key(slug: str) -> str:
    return f"install:{slug}"


def _onboarding_url(slug: str, host_agent: bool) -> str:
    url = f"/clusters/{quote(slug)}/onboarding"
    return url + "?host_agent=1" if host_agent else url


def _validate(name: str, slug: str) -> dict[str, str]:
    """The chart's own rules and messages (docs/chart.md, Validation)."""
    errors: dict[str, str] = {}
    if not name:
        errors["name"] = "Give the cluster a name: it is clusterAgent.clusterName."
    elif len(name) > MAX_NAME:
        errors["name"] = f"At most {MAX_NAME} characters."
    elif any(unicodedata.category(c).startswith("C") for c in name):
        errors["name"] = "No control characters (tabs, newlines)."
    if slug:
        if not is_dns_label(slug):
            errors["slug"] = (
                f'clusterAgent.clusterSlug "{slug}" is not a DNS label: use at most {MAX_SLUG} '
                "lowercase letters, digits and '-', starting and ending with a letter or digit"
            )
    elif name and not slugify(name):
        errors["slug"] = (
            f'clusterAgent.clusterName "{name}" has no letter or digit to derive a slug from: '
            "set clusterAgent.clusterSlug"
        )
    return errors


@router.get("/clusters")
async def list_clusters(request: Request, viewer: ViewerDep, runtime: RuntimeDep) -> Response:
    viewer.require(Scope.CLUSTERS_READ)
    rows = await clusters.list_clusters(runtime, viewer.principal)
    return get_web(request).templates.render(
        request,
        "clusters/list.html",
        title="Clusters",
        active="clusters",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        clusters=rows,
    )


def _wizard(
    request: Request,
    viewer: Viewer,
    *,
    values: dict[str, Any],
    errors: dict[str, str],
    existing: str | None = None,
) -> Response:
    return get_web(request).templates.render(
        request,
        "clusters/add.html",
        title="Add a cluster",
        active="clusters",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        values=values,
        errors=errors,
        existing=existing,
        lifetimes=TOKEN_LIFETIMES,
        host_agent_dir=HOST_AGENT_DATA_DIR,
        max_slug=MAX_SLUG,
    )


@router.get("/clusters/add")
def add_form(request: Request, viewer: ViewerDep) -> Response:
    viewer.require(Scope.CLUSTERS_WRITE)
    viewer.require(Scope.TOKENS_WRITE)
    values = {"name": "", "slug": "", "slug_edited": "", "host_agent": False, "expires": ""}
    return _wizard(request, viewer, values=values, errors={})


@router.post("/clusters/add")
async def add_cluster(
    request: Request, viewer: ViewerDep, form: FormDep, runtime: RuntimeDep
) -> Response:
    """Register the cluster and mint its install token, then show what to run."""
    viewer.require(Scope.CLUSTERS_WRITE)
    viewer.require(Scope.TOKENS_WRITE)
    name, slug = form.get("name"), form.get("slug")
    values = {
        "name": name,
        "slug": slug,
        "slug_edited": form.get("slug_edited"),
        "host_agent": form.flag("host_agent"),
        "expires": form.get("expires") if form.get("expires") in TOKEN_LIFETIMES else "",
    }
    errors = _validate(name, slug)
    if errors:
        return _wizard(request, viewer, values=values, errors=errors)
    try:
        cluster = await clusters.register_cluster(
            runtime, viewer.principal, ClusterCreate(name=name, slug=slug or None)
        )
    except (BadRequestError, ConflictError) as exc:
        slug_shown = slug or slugify(name)
        return _wizard(
            request,
            viewer,
            values=values,
            errors={"slug": exc.message},
            existing=slug_shown if exc.reason == "cluster_exists" else None,
        )
    lifetime = TOKEN_LIFETIMES[str(values["expires"])][1]
    created = await tokens.create_install_token(
        runtime,
        viewer.principal,
        InstallTokenCreate(
            name=f"cluster {cluster.slug}", cluster_slug=cluster.slug, expires_in_seconds=lifetime
        ),
    )
    viewer.session.reveal[_reveal_key(cluster.slug)] = created.token
    viewer.session.flash(
        "ok",
        f"Cluster {cluster.slug} registered and install token {created.prefix}… minted for it. "
        "Run one of the commands below; the checklist turns green as the agents report.",
    )
    return RedirectResponse(
        _onboarding_url(cluster.slug, bool(values["host_agent"])), status_code=303
    )


@router.get("/clusters/{slug}")
async def cluster_detail(
    slug: str, request: Request, viewer: ViewerDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.CLUSTERS_READ)
    cluster = await clusters.get_cluster(runtime, viewer.principal, slug)
    online = clusters.collectors_seen_recently(
        cluster, stale_seconds=runtime.settings.agent_stale_seconds, now=utcnow()
    )
    return get_web(request).templates.render(
        request,
        "clusters/detail.html",
        title=f"Cluster {cluster.slug}",
        active="clusters",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        cluster=cluster,
        online=online,
        backend_sync_interval=runtime.settings.k8s_sync_interval,
    )


async def _status(request: Request, viewer: Viewer, runtime: ConsoleRuntime, slug: str) -> Any:
    viewer.require(Scope.CLUSTERS_READ)
    status = await onboarding.cluster_onboarding(
        runtime, viewer.principal, slug, backend_url=backend_url(request, runtime)
    )
    public = await clusters.get_cluster(runtime, viewer.principal, slug)
    return status, public


@router.get("/clusters/{slug}/onboarding")
async def onboarding_page(
    slug: str,
    request: Request,
    viewer: ViewerDep,
    runtime: RuntimeDep,
    host_agent: bool = False,
) -> Response:
    status, cluster = await _status(request, viewer, runtime, slug)
    token = viewer.session.reveal.get(_reveal_key(cluster.slug))
    sync = format_duration(parse_duration(runtime.settings.k8s_sync_interval))
    plan = InstallPlan(
        backend_url=backend_url(request, runtime),
        install_token=token or TOKEN_PLACEHOLDER,
        cluster_name=cluster.name,
        cluster_slug=cluster.slug,
        host_data_dir=HOST_AGENT_DATA_DIR if host_agent else None,
        chart_version=VERSION,
        sync_interval=sync,
        chart=runtime.settings.chart_ref,
        repo_url=runtime.settings.chart_repo_url,
    )
    return get_web(request).templates.render(
        request,
        "clusters/onboarding.html",
        title=f"Onboard {cluster.slug}",
        active="clusters",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        cluster=cluster,
        status=status,
        plan=plan,
        token_shown=token is not None,
        host_agent=host_agent,
        host_agent_dir=HOST_AGENT_DATA_DIR,
        url_warning=public_url_warning(runtime.settings.public_url, plan.backend_url),
    )


@router.get("/clusters/{slug}/onboarding/status")
async def onboarding_status_json(
    slug: str, request: Request, viewer: ViewerDep, runtime: RuntimeDep
) -> JSONResponse:
    """What the checklist polls: the three gates, their causes, the cluster's warnings (the
    same service as GET /api/v1/clusters/{slug}/onboarding)."""
    viewer.require(Scope.CLUSTERS_READ)
    status = await onboarding.cluster_onboarding(
        runtime, viewer.principal, slug, backend_url=backend_url(request, runtime)
    )
    return JSONResponse(status.model_dump(mode="json"), headers={"Cache-Control": "no-store"})


@router.post("/clusters/{slug}/install-token")
async def mint_cluster_token(
    slug: str, request: Request, viewer: ViewerDep, form: FormDep, runtime: RuntimeDep
) -> Response:
    """Another install token for this cluster: the first one is shown once and may be gone."""
    viewer.require(Scope.TOKENS_WRITE)
    created = await tokens.create_cluster_install_token(runtime, viewer.principal, slug)
    assert created.cluster_slug is not None
    viewer.session.reveal[_reveal_key(created.cluster_slug)] = created.token
    viewer.session.flash(
        "ok", f"Install token {created.prefix}… minted for {created.cluster_slug}."
    )
    return RedirectResponse(
        _onboarding_url(created.cluster_slug, form.flag("host_agent")), status_code=303
    )
