"""``proxima-fleet agents``: list and inspect agents; release, rotate and revoke identities
through ``/api/v1/fleet/agents``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group

from contracts.views import AgentDetailView, AgentFilter, AgentView
from contracts.vocabulary import AgentFlag, AgentStatus, AgentType, ReleaseOutcome
from flows.cli._common import JsonOption, console_client, emit_json, fail, fields, stdout, table

app = typer.Typer(help="Agents: list, inspect, release, rotate and revoke identities.")

AgentId = Annotated[str, typer.Argument(help="The agent's id.")]


@app.command("list")
def list_agents(
    status: Annotated[AgentStatus | None, typer.Option(help="Only agents in this status.")] = None,
    agent_type: Annotated[
        AgentType | None, typer.Option("--type", help="Only agents of this type.")
    ] = None,
    flag: Annotated[AgentFlag | None, typer.Option(help="Only agents with this flag.")] = None,
    name: Annotated[str | None, typer.Option(help="Only names containing this.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Every agent matching the filters (all pages)."""
    with console_client() as client:
        agents = client.agents(
            AgentFilter(agent_type=agent_type, status=status, name=name, flag=flag)
        )
    if as_json:
        emit_json(agents)
        return
    rows = [
        (a.id, a.name, a.agent_type, a.status, a.version, a.last_seen_at, a.flags) for a in agents
    ]
    columns = ("id", "name", "type", "status", "version", "last seen", "flags")
    stdout.print(table(f"{len(agents)} agents", columns, rows))


def _summary(agent: AgentView) -> list[tuple[str, object]]:
    return [
        ("id", agent.id),
        ("type", agent.agent_type),
        ("status", agent.status),
        ("flags", agent.flags),
        ("version", agent.version),
        ("cluster", agent.cluster_slug),
        ("labels", agent.labels),
        ("enrolled", agent.enrolled_at),
        ("last seen", agent.last_seen_at),
        ("instance", agent.instance_id),
        ("can self-update", agent.can_self_update),
        ("refused connections", agent.refused_connections),
        ("released", agent.released_at),
        ("revoked", agent.revoked_at),
        ("credentials rotated", agent.credentials_rotated_at),
    ]


def _render(agent: AgentDetailView, events: int) -> Group:
    evidence = table(
        "identity evidence",
        ("kind", "source", "first seen", "last seen"),
        [(e.kind, e.source, e.first_seen_at, e.last_seen_at) for e in agent.evidence],
    )
    history = table(
        f"history (latest {events})",
        ("at", "event", "message"),
        [(h.at, h.kind, h.message) for h in agent.history[-events:]],
    )
    return Group(fields(f"agent {agent.name}", _summary(agent)), evidence, history)


@app.command()
def show(
    agent_id: AgentId,
    events: Annotated[int, typer.Option(min=1, help="History events to list.")] = 20,
    as_json: JsonOption = False,
) -> None:
    """One agent: status, identity evidence and history."""
    with console_client() as client:
        agent = client.agent(agent_id)
    if as_json:
        emit_json(agent)
    else:
        stdout.print(_render(agent, events))


@app.command()
def release(
    agent_id: AgentId,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would happen; change nothing.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Free the record's name so the next enrollment re-binds it (same id and history).
    A refusal (revoked, or seen within the quiet window) exits 1."""
    with console_client() as client:
        decision = client.release_identity(agent_id, dry_run=dry_run)
    if as_json:
        emit_json(decision)
    if decision.outcome is ReleaseOutcome.REFUSED:
        if as_json:
            raise typer.Exit(1)
        fail(str(decision.reason or "refused"), decision.message)
    if not as_json:
        note = f": {decision.message}" if decision.message else ""
        dry = " (dry run: nothing changed)" if decision.dry_run else ""
        stdout.print(f"agent {decision.agent_id}: {decision.outcome}{dry}{note}")


@app.command()
def rotate(agent_id: AgentId, as_json: JsonOption = False) -> None:
    """Have the online agent switch to a new key, signed by its current one."""
    with console_client() as client:
        rotation = client.rotate_credentials(agent_id)
    if as_json:
        emit_json(rotation)
    else:
        stdout.print(
            f"agent {rotation.agent_id}: new key {rotation.public_key} at {rotation.rotated_at}"
        )


@app.command()
def revoke(agent_id: AgentId, as_json: JsonOption = False) -> None:
    """Revoke the identity for good: its connection is cut and it is never re-bound."""
    with console_client() as client:
        agent = client.revoke(agent_id)
    if as_json:
        emit_json(agent)
    else:
        stdout.print(f"agent {agent.id} ({agent.name}): revoked at {agent.revoked_at}")
