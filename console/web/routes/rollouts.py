"""Rollouts: the list, one rollout with live waves and per-agent errors, the decisions an
operator takes when it stalls, and a form to start one."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from console.core.settings import flow_run_link, public_url_warning
from console.errors import ConsoleError, ForbiddenError, NotFoundError, UnauthorizedError
from console.services import artifacts
from console.services.rollouts import drivers, lifecycle, planning, reads
from console.web import rollout_form
from console.web.deps import FormDep, RuntimeDep, Viewer, ViewerDep, get_web
from console.web.forms import FORM_WIDE, FieldErrors
from console.web.routing import PageRoute
from contracts.rollouts import ArtifactRef, RolloutPublic
from contracts.vocabulary import AgentType, ErrorReason, FailureType, Scope
from rollout_policy import HALTED_STATES, LEGAL_EVENTS, TERMINAL_STATES, EventKind

router = APIRouter(route_class=PageRoute, include_in_schema=False)

OPERATOR_EVENTS = frozenset({EventKind.RESUME, EventKind.PAUSE, EventKind.ABORT})
"""The moves the page offers (``POST /rollouts/{id}/{event}``), when the state allows them."""
RESTART_DRIVER = "restart-driver"


def _live(rollout: RolloutPublic) -> dict[str, Any]:
    """What ``rollouts/_live.html`` decides with, from the state machine: the page never spells
    a state or an event itself."""
    return {
        "rollout": rollout,
        "final": rollout.state in TERMINAL_STATES,
        "halted": rollout.state in HALTED_STATES,
        "moves": LEGAL_EVENTS[rollout.state] & OPERATOR_EVENTS,
    }


async def _artifacts(viewer: Viewer, runtime: Any) -> list[ArtifactRef]:
    if not viewer.can(Scope.ROLLOUTS_READ):
        return []
    return await artifacts.list_artifacts(runtime, viewer.principal)


@router.get("/rollouts")
async def list_rollouts(request: Request, viewer: ViewerDep, runtime: RuntimeDep) -> Response:
    viewer.require(Scope.ROLLOUTS_READ)
    rollouts = await reads.list_rollouts(runtime, viewer.principal, limit=200)
    return get_web(request).templates.render(
        request,
        "rollouts/list.html",
        title="Rollouts",
        active="rollouts",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        rollouts=rollouts,
    )


async def _form_page(
    request: Request,
    viewer: Viewer,
    runtime: Any,
    *,
    values: dict[str, Any],
    errors: FieldErrors,
) -> Response:
    return get_web(request).templates.render(
        request,
        "rollouts/new.html",
        title="Start a rollout",
        active="rollouts",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        values=values,
        errors=errors,
        form_wide=errors.get(FORM_WIDE, []),
        summary=[
            (rollout_form.FIELD_IDS[field], message)
            for field, messages in errors.items()
            if field in rollout_form.FIELD_IDS
            for message in messages
        ],
        artifacts=await _artifacts(viewer, runtime),
        agent_types=[t.value for t in AgentType],
        failure_types=[f.value for f in FailureType],
        prefect=bool(runtime.settings.prefect_api_url),
        url_warning=public_url_warning(
            runtime.settings.public_url, runtime.backend_url(str(request.base_url))
        ),
    )


@router.get("/rollouts/new")
async def new_rollout(request: Request, viewer: ViewerDep, runtime: RuntimeDep) -> Response:
    viewer.require(Scope.ROLLOUTS_WRITE)
    return await _form_page(
        request, viewer, runtime, values=rollout_form.defaults(runtime), errors=FieldErrors()
    )


@router.post("/rollouts/new")
async def create_rollout(
    request: Request, viewer: ViewerDep, form: FormDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.ROLLOUTS_WRITE)
    values = rollout_form.values(form)
    create, errors = rollout_form.parse(values, await _artifacts(viewer, runtime))
    if create is None:
        return await _form_page(request, viewer, runtime, values=values, errors=errors)
    try:
        rollout = await planning.create(
            runtime,
            viewer.principal,
            create,
            base_url=runtime.backend_url(str(request.base_url)),
        )
    except (ForbiddenError, UnauthorizedError):
        raise
    except ConsoleError as exc:
        return await _form_page(
            request,
            viewer,
            runtime,
            values=values,
            errors=FieldErrors({FORM_WIDE: [f"{exc.reason}: {exc.message}"]}),
        )
    viewer.session.flash(
        "ok",
        f"Rollout {rollout.name} created: {len(rollout.waves)} wave(s), "
        f"{len(rollout.exclusions)} agent(s) excluded up front.",
    )
    return RedirectResponse(f"/rollouts/{quote(rollout.id)}", status_code=303)


async def _load(viewer: Viewer, runtime: Any, rollout_id: str) -> RolloutPublic:
    viewer.require(Scope.ROLLOUTS_READ)
    return await reads.get_rollout(runtime, viewer.principal, rollout_id, targets=True)


@router.get("/rollouts/{rollout_id}")
async def rollout_detail(
    rollout_id: str, request: Request, viewer: ViewerDep, runtime: RuntimeDep
) -> Response:
    rollout = await _load(viewer, runtime, rollout_id)
    return get_web(request).templates.render(
        request,
        "rollouts/detail.html",
        title=f"Rollout {rollout.name}",
        active="rollouts",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        **_live(rollout),
        flow_run_url=flow_run_link(runtime.settings, rollout.flow_run_id),
    )


@router.get("/rollouts/{rollout_id}/live")
async def rollout_live(
    rollout_id: str, request: Request, viewer: ViewerDep, runtime: RuntimeDep
) -> Response:
    """The part of the rollout page that changes, re-rendered for the page's poll."""
    rollout = await _load(viewer, runtime, rollout_id)
    return get_web(request).templates.fragment(
        "rollouts/_live.html",
        viewer=viewer,
        **_live(rollout),
    )


@router.post("/rollouts/{rollout_id}/{decision}")
async def decide(
    rollout_id: str,
    decision: str,
    viewer: ViewerDep,
    form: FormDep,
    runtime: RuntimeDep,
) -> Response:
    event = next((e for e in OPERATOR_EVENTS if e.value == decision), None)
    if event is None and decision != RESTART_DRIVER:
        raise NotFoundError(ErrorReason.NO_SUCH_DECISION, f"no rollout decision {decision!r}")
    viewer.require(Scope.ROLLOUTS_WRITE)
    reason = (form.get("reason") or "").strip() or None
    if event is EventKind.ABORT and reason is None:
        viewer.session.flash("error", "Give a reason to abort: it is recorded with the rollout.")
        return RedirectResponse(f"/rollouts/{quote(rollout_id)}", status_code=303)
    try:
        if event is None:
            done = await drivers.restart_driver(runtime, viewer.principal, rollout_id)
        else:
            done = await lifecycle.transition(
                runtime,
                viewer.principal,
                rollout_id,
                event,
                reason=None if event is EventKind.RESUME else reason,
            )
    except (ForbiddenError, UnauthorizedError, NotFoundError):
        raise
    except ConsoleError as exc:
        viewer.session.flash("error", exc.message, exc.reason)
    else:
        viewer.session.flash("ok", f"Rollout {done.name} is {done.state}.")
    return RedirectResponse(f"/rollouts/{quote(rollout_id)}", status_code=303)
