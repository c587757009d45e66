"""The fleet: a filterable list, one agent with its history, and the identity actions.

Each action has a confirmation step (GET shows what it does, POST does it) and calls the same
service as the API, so the same scope checks and the same refusals apply; a refusal is shown
with the API's reason and message verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from console.errors import ConsoleError, ForbiddenError, NotFoundError, UnauthorizedError
from console.schemas import Scope
from console.services import fleet, identities
from console.web.deps import FormDep, RuntimeDep, ViewerDep, get_web
from console.web.routing import PageRoute
from contracts.agent_types import AgentType
from contracts.bounds import MAX_SQL_INT
from contracts.vocabulary import AgentFlag, AgentStatus, ErrorReason

router = APIRouter(route_class=PageRoute, include_in_schema=False)

PAGE_SIZE = 100


@dataclass(frozen=True, slots=True)
class Action:
    slug: str
    label: str
    danger: bool
    explains: str


ACTIONS = {
    "release-identity": Action(
        "release-identity",
        "Release identity",
        False,
        "Clears this agent's NATS identity so the next enrollment under its name re-binds this "
        "same record, keeping its id, links and history. Refused for a revoked agent and for one "
        "seen within the quiet window: a live agent's name is never freed underneath it.",
    ),
    "rotate-credentials": Action(
        "rotate-credentials",
        "Rotate credentials",
        False,
        "Asks the online agent to make a new key, signed by the one it holds; the old key stops "
        "working before this returns. Needs the agent online holding its identity: it cannot "
        "recover an agent whose state is gone (release its identity instead).",
    ),
    "revoke": Action(
        "revoke",
        "Revoke",
        True,
        "Cuts the agent's live connection at once and never lets this record be re-bound. It "
        "cannot be undone: the machine has to enroll under another name.",
    ),
}


def _enum(value: str, kind: type[Any]) -> Any:
    try:
        return kind(value) if value else None
    except ValueError:
        return None


@router.get("/agents")
async def list_agents(
    request: Request,
    viewer: ViewerDep,
    runtime: RuntimeDep,
    agent_type: str = "",
    status: str = "",
    version: str = "",
    name: str = "",
    flag: str = "",
    offset: Annotated[int, Query(le=MAX_SQL_INT)] = 0,
) -> Response:
    viewer.require(Scope.AGENTS_READ)
    offset = max(0, offset)
    filters = {
        "agent_type": agent_type if _enum(agent_type, AgentType) else "",
        "status": status if _enum(status, AgentStatus) else "",
        "version": version[:64],
        "name": name[:253],
        "flag": flag if _enum(flag, AgentFlag) else "",
    }
    page = await fleet.list_agents(
        runtime,
        viewer.principal,
        agent_type=_enum(filters["agent_type"], AgentType),
        status=_enum(filters["status"], AgentStatus),
        version=filters["version"] or None,
        name=filters["name"] or None,
        flag=_enum(filters["flag"], AgentFlag),
        limit=PAGE_SIZE,
        offset=offset,
    )
    versions = await fleet.versions(runtime, viewer.principal)
    query = {k: v for k, v in filters.items() if v}

    def page_url(at: int) -> str:
        return "/agents?" + urlencode({**query, "offset": at})

    return get_web(request).templates.render(
        request,
        "agents/list.html",
        title="Agents",
        active="agents",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        page=page,
        filters=filters,
        filtered=bool(query),
        versions=versions,
        agent_types=[t.value for t in AgentType],
        statuses=[s.value for s in AgentStatus],
        flags=[f.value for f in AgentFlag],
        prev_url=page_url(max(0, offset - PAGE_SIZE)) if offset else None,
        next_url=page_url(offset + PAGE_SIZE)
        if offset + PAGE_SIZE < page.total or page.total_capped
        else None,
    )


@router.get("/agents/{agent_id}")
async def agent_detail(
    agent_id: str, request: Request, viewer: ViewerDep, runtime: RuntimeDep
) -> Response:
    viewer.require(Scope.AGENTS_READ)
    agent = await fleet.get_agent(runtime, viewer.principal, agent_id)
    return get_web(request).templates.render(
        request,
        "agents/detail.html",
        title=f"Agent {agent.name}",
        active="agents",
        viewer=viewer,
        flashes=viewer.session.take_flashes(),
        agent=agent,
        actions=ACTIONS,
        quiet_seconds=runtime.settings.identity_quiet_seconds,
    )


def _action(name: str) -> Action:
    action = ACTIONS.get(name)
    if action is None:
        raise NotFoundError(ErrorReason.NO_SUCH_ACTION, f"no agent action {name!r}")
    return action


@router.get("/agents/{agent_id}/{action_name}")
async def confirm_action(
    agent_id: str, action_name: str, request: Request, viewer: ViewerDep, runtime: RuntimeDep
) -> Response:
    action = _action(action_name)
    viewer.require(Scope.AGENTS_WRITE)
    viewer.require(Scope.AGENTS_READ)
    agent = await fleet.get_agent(runtime, viewer.principal, agent_id)
    return get_web(request).templates.render(
        request,
        "agents/confirm.html",
        title=f"{action.label}: {agent.name}",
        active="agents",
        viewer=viewer,
        agent=agent,
        action=action,
    )


@router.post("/agents/{agent_id}/{action_name}")
async def do_action(
    agent_id: str,
    action_name: str,
    viewer: ViewerDep,
    _form: FormDep,
    runtime: RuntimeDep,
) -> Response:
    action = _action(action_name)
    viewer.require(Scope.AGENTS_WRITE)
    try:
        if action.slug == "release-identity":
            released = await identities.release(runtime, viewer.principal, agent_id)
            message = f"Identity of {released.name} released: its next enrollment re-binds it."
        elif action.slug == "rotate-credentials":
            rotated = await identities.rotate_credentials(runtime, viewer.principal, agent_id)
            message = f"Credentials rotated: the agent now holds key {rotated.public_key[:12]}…"
        else:
            revoked = await identities.revoke_agent(runtime, viewer.principal, agent_id)
            message = f"{revoked.name} revoked: its connection was cut."
    except (ForbiddenError, UnauthorizedError, NotFoundError):
        raise
    except ConsoleError as exc:
        viewer.session.flash("error", exc.message, exc.reason)
    else:
        viewer.session.flash("ok", message)
    return RedirectResponse(f"/agents/{quote(agent_id)}", status_code=303)
