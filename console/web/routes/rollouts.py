"""Rollouts: the list, one rollout with live waves and per-agent errors, the decisions an
operator takes when it stalls, and a form to start one."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import ValidationError

from console.core.settings import flow_run_link, public_url_warning
from console.errors import ConsoleError, ForbiddenError, NotFoundError, UnauthorizedError
from console.schemas import Scope
from console.services import artifacts
from console.services.rollouts import drivers, lifecycle, planning, reads
from console.web.deps import FormDep, RuntimeDep, Viewer, ViewerDep, get_web
from console.web.forms import Form
from console.web.routing import PageRoute
from contracts.agent_types import AgentType
from contracts.rollouts import ArtifactRef, RolloutCreate, RolloutPublic
from contracts.vocabulary import ErrorReason, FailureType, ThresholdAction
from fleet_policy.defaults import (
    DEFAULT_CANARY_SIZE,
    DEFAULT_CRITERION,
    DEFAULT_MIN_EXECUTED,
    DEFAULT_WAVE_PERCENTAGES,
    DEFAULT_WAVE_TIMEOUT_SECONDS,
)

router = APIRouter(route_class=PageRoute, include_in_schema=False)

FINAL_STATES = ("succeeded", "aborted", "failed")
DECISIONS = ("resume", "pause", "abort", "restart-driver")
_SPLIT = re.compile(r"[\s,]+")


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


def _text(number: float | None) -> str:
    return "" if number is None else f"{number:g}"


def _defaults(runtime: Any) -> dict[str, Any]:
    """The form as first shown: the one default rollout policy (``fleet_policy.defaults``)."""
    return {
        "name": "",
        "source": "hosted",
        "hosted": "",
        "version": "",
        "url": "",
        "sha256": "",
        "signature": "",
        "agent_types": ["host"],
        "labels": "",
        "version_range": "",
        "agent_ids": "",
        "canary_size": str(DEFAULT_CANARY_SIZE),
        "percentages": ", ".join(f"{p:g}" for p in DEFAULT_WAVE_PERCENTAGES),
        "max_wave_size": "",
        "criteria": [
            {
                "failure_type": DEFAULT_CRITERION.failure_type.value,
                "threshold_percent": _text(DEFAULT_CRITERION.threshold_percent),
                "threshold_count": _text(DEFAULT_CRITERION.threshold_count),
                "min_executed": str(DEFAULT_CRITERION.min_executed),
                "action": DEFAULT_CRITERION.action.value,
            },
            {  # a second row offered for timeouts; empty thresholds leave it out
                "failure_type": FailureType.TIMED_OUT.value,
                "threshold_percent": "",
                "threshold_count": "",
                "min_executed": str(DEFAULT_MIN_EXECUTED),
                "action": ThresholdAction.ABORT.value,
            },
        ],
        "wave_timeout_seconds": f"{DEFAULT_WAVE_TIMEOUT_SECONDS:g}",
        "start_flow": bool(runtime.settings.prefect_api_url),
    }


async def _form_page(
    request: Request,
    viewer: Viewer,
    runtime: Any,
    *,
    values: dict[str, Any],
    errors: list[str],
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
    return await _form_page(request, viewer, runtime, values=_defaults(runtime), errors=[])


def _values(form: Form) -> dict[str, Any]:
    return {
        "name": form.get("name"),
        "source": "reference" if form.get("source") == "reference" else "hosted",
        "hosted": form.get("hosted"),
        "version": form.get("version"),
        "url": form.get("url"),
        "sha256": form.get("sha256").lower(),
        "signature": form.get("signature"),
        "agent_types": form.getlist("agent_types"),
        "labels": form.get("labels"),
        "version_range": form.get("version_range"),
        "agent_ids": form.get("agent_ids"),
        "canary_size": form.get("canary_size"),
        "percentages": form.get("percentages"),
        "max_wave_size": form.get("max_wave_size"),
        "criteria": [
            {
                "failure_type": form.get(f"c{i}_failure_type", DEFAULT_CRITERION.failure_type),
                "threshold_percent": form.get(f"c{i}_threshold_percent"),
                "threshold_count": form.get(f"c{i}_threshold_count"),
                "min_executed": form.get(f"c{i}_min_executed"),
                "action": form.get(f"c{i}_action", DEFAULT_CRITERION.action),
            }
            for i in range(2)
        ],
        "wave_timeout_seconds": form.get("wave_timeout_seconds"),
        "start_flow": form.flag("start_flow"),
    }


def _body(values: dict[str, Any], artifacts: list[ArtifactRef]) -> tuple[dict[str, Any], list[str]]:
    """The API's request body from the form; the API's own model validates it next."""
    errors: list[str] = []
    if values["source"] == "hosted":
        match = next((a for a in artifacts if a.url == values["hosted"]), None)
        if match is None:
            errors.append("artifact: pick a hosted build, or enter a reference")
            artifact: dict[str, Any] = {}
        else:
            artifact = match.model_dump()
    else:
        artifact = {k: values[k] for k in ("version", "url", "sha256", "signature")}
    labels: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in values["labels"].split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            errors.append(f"selector.labels: {item!r} is not key=value")
        else:
            labels[key.strip()] = value.strip()
    percentages: list[str] = [p for p in _SPLIT.split(values["percentages"]) if p]
    criteria = []
    for i, c in enumerate(values["criteria"]):
        if not c["threshold_percent"] and not c["threshold_count"]:
            continue  # an empty row
        criteria.append(
            {
                "failure_type": c["failure_type"],
                "threshold_percent": c["threshold_percent"] or None,
                "threshold_count": c["threshold_count"] or None,
                "min_executed": c["min_executed"] or DEFAULT_MIN_EXECUTED,
                "action": c["action"],
            }
        )
        if c["action"] not in set(ThresholdAction):
            errors.append(f"criteria.{i}.action: stall or abort")
    body: dict[str, Any] = {
        "name": values["name"] or "rollout",
        "artifact": artifact,
        "selector": {
            "agent_types": values["agent_types"],
            "labels": labels,
            "version_range": values["version_range"],
            "agent_ids": [a for a in _SPLIT.split(values["agent_ids"]) if a],
        },
        "waves": {
            "canary_size": values["canary_size"] or DEFAULT_CANARY_SIZE,
            "percentages": percentages or None,
            "max_wave_size": values["max_wave_size"] or None,
        },
        "criteria": criteria,
        "wave_timeout_seconds": values["wave_timeout_seconds"] or DEFAULT_WAVE_TIMEOUT_SECONDS,
        "start_flow": values["start_flow"],
    }
    return body, errors


def _validation_errors(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        out.append(f"{loc or 'rollout'}: {str(err.get('msg')).removeprefix('Value error, ')}")
    return out


@router.post("/rollouts/new")
async def create_rollout(
    request: Request, viewer: ViewerDep, form: FormDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.ROLLOUTS_WRITE)
    values = _values(form)
    body, errors = _body(values, await _artifacts(viewer, runtime))
    if not errors:
        try:
            create = RolloutCreate.model_validate(body)
        except ValidationError as exc:
            errors = _validation_errors(exc)
    if errors:
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
            errors=[f"{exc.reason}: {exc.message}"],
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
        rollout=rollout,
        final=rollout.state in FINAL_STATES,
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
        rollout=rollout,
        final=rollout.state in FINAL_STATES,
    )


@router.post("/rollouts/{rollout_id}/{decision}")
async def decide(
    rollout_id: str,
    decision: str,
    viewer: ViewerDep,
    form: FormDep,
    runtime: RuntimeDep,
) -> Response:
    if decision not in DECISIONS:
        raise NotFoundError(ErrorReason.NO_SUCH_DECISION, f"no rollout decision {decision!r}")
    viewer.require(Scope.ROLLOUTS_WRITE)
    reason = (form.get("reason") or "").strip() or None
    if decision == "abort" and reason is None:
        viewer.session.flash("error", "Give a reason to abort: it is recorded with the rollout.")
        return RedirectResponse(f"/rollouts/{quote(rollout_id)}", status_code=303)
    try:
        if decision == "restart-driver":
            done = await drivers.restart_driver(runtime, viewer.principal, rollout_id)
        else:
            done = await lifecycle.transition(
                runtime,
                viewer.principal,
                rollout_id,
                decision,
                reason=None if decision == "resume" else reason,
            )
    except (ForbiddenError, UnauthorizedError, NotFoundError):
        raise
    except ConsoleError as exc:
        viewer.session.flash("error", exc.message, exc.reason)
    else:
        viewer.session.flash("ok", f"Rollout {done.name} is {done.state}.")
    return RedirectResponse(f"/rollouts/{quote(rollout_id)}", status_code=303)
