"""Install tokens (what agents enroll with) and API tokens (what people and flows sign in with).

A token is shown once, on the page right after it is created, and never again: the Console keeps
only its hash.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import ValidationError

from console.schemas import (
    ApiTokenCreate,
    ApiTokenPublic,
    InstallTokenCreate,
    InstallTokenPublic,
)
from console.services import tokens
from console.web.deps import FormDep, RuntimeDep, Viewer, ViewerDep, get_web
from console.web.forms import FieldErrors, field_by_prefix
from console.web.routing import PageRoute
from contracts.vocabulary import Scope

router = APIRouter(route_class=PageRoute, include_in_schema=False)

LIFETIMES = {
    "": "never",
    "3600": "1 hour",
    "86400": "1 day",
    "604800": "7 days",
    "2592000": "30 days",
    "31536000": "365 days",
}
_NEW_INSTALL = "new-install-token"
_NEW_API = "new-api-token"


# Each form's fields, by the location of the API model's errors, as the page's element ids.
_INSTALL_FIELDS = field_by_prefix(
    {
        ("name",): "it-name",
        ("expires_in_seconds",): "it-exp",
        ("max_uses",): "it-uses",
        ("cluster_slug",): "it-slug",
    }
)
_API_FIELDS = field_by_prefix(
    {("name",): "at-name", ("scopes",): "at-scopes", ("expires_in_seconds",): "at-exp"}
)


@router.get("/tokens")
async def tokens_page(request: Request, viewer: ViewerDep, runtime: RuntimeDep) -> Response:
    return await _page(request, viewer, runtime)


async def _page(
    request: Request,
    viewer: Viewer,
    runtime: Any,
    *,
    errors: FieldErrors | None = None,
    refused: str = "",
    values: dict[str, Any] | None = None,
) -> Response:
    """The page; after a refused form (``refused``: "install" or "api") with its values kept
    and each error beside its field."""
    tokens.require_token_reader(viewer.principal)
    install: list[InstallTokenPublic] = await tokens.list_install_tokens(runtime, viewer.principal)
    api: list[ApiTokenPublic] = await tokens.list_api_tokens(runtime, viewer.principal)
    reveal = viewer.session.reveal
    return get_web(request).templates.render(
        request,
        "tokens/index.html",
        title="Settings",
        active="tokens",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        install_tokens=install,
        api_tokens=api,
        new_install=reveal.pop(_NEW_INSTALL, None),
        new_api=reveal.pop(_NEW_API, None),
        lifetimes=LIFETIMES,
        grantable=sorted(viewer.principal.scopes),
        errors=errors or FieldErrors(),
        refused=refused,
        values=values or {},
    )


def _int(value: str) -> int | None:
    return int(value) if value.strip().isdigit() else None


@router.post("/tokens/install")
async def create_install_token(
    request: Request, viewer: ViewerDep, form: FormDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.TOKENS_WRITE)
    values = {
        "name": form.get("name"),
        "expires_in_seconds": form.get("expires_in_seconds"),
        "max_uses": form.get("max_uses"),
        "cluster_slug": form.get("cluster_slug"),
    }
    try:
        body = InstallTokenCreate.model_validate(
            {
                "name": values["name"] or "install token",
                "expires_in_seconds": _int(values["expires_in_seconds"]),
                "max_uses": _int(values["max_uses"]),
                "cluster_slug": values["cluster_slug"] or None,
            }
        )
    except ValidationError as exc:
        errors = FieldErrors()
        errors.add_validation(exc, _INSTALL_FIELDS)
        return await _page(
            request, viewer, runtime, errors=errors, refused="install", values=values
        )
    created = await tokens.create_install_token(runtime, viewer.principal, body)
    viewer.session.reveal[_NEW_INSTALL] = created.token
    viewer.session.flash("ok", f"Install token {created.name!r} created.")
    return RedirectResponse("/tokens#new-install-token", status_code=303)


@router.post("/tokens/install/{token_id}/revoke")
async def revoke_install_token(
    token_id: str, viewer: ViewerDep, _form: FormDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.TOKENS_WRITE)
    token = await tokens.revoke_install_token(runtime, viewer.principal, token_id)
    viewer.session.flash("ok", f"Install token {token.name!r} ({token.prefix}…) revoked.")
    return RedirectResponse("/tokens", status_code=303)


@router.post("/tokens/api")
async def create_api_token(
    request: Request, viewer: ViewerDep, form: FormDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.TOKENS_WRITE)
    values: dict[str, Any] = {
        "name": form.get("name"),
        "scopes": form.getlist("scopes"),
        "expires_in_seconds": form.get("expires_in_seconds"),
    }
    try:
        body = ApiTokenCreate.model_validate(
            {**values, "expires_in_seconds": _int(values["expires_in_seconds"])}
        )
    except ValidationError as exc:
        errors = FieldErrors()
        errors.add_validation(exc, _API_FIELDS)
        return await _page(request, viewer, runtime, errors=errors, refused="api", values=values)
    created = await tokens.create_api_token(runtime, viewer.principal, body)
    viewer.session.reveal[_NEW_API] = created.token
    viewer.session.flash("ok", f"API token {created.name!r} created.")
    return RedirectResponse("/tokens#new-api-token", status_code=303)


@router.post("/tokens/api/{token_id}/revoke")
async def revoke_api_token(
    token_id: str, viewer: ViewerDep, _form: FormDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.TOKENS_WRITE)
    token = await tokens.revoke_api_token(runtime, viewer.principal, token_id)
    viewer.session.flash("ok", f"API token {token.name!r} ({token.prefix}…) revoked.")
    return RedirectResponse("/tokens", status_code=303)
