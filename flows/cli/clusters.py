"""``proxima-fleet clusters``: the registered and reporting clusters, through
``/api/v1/clusters``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Group

from contracts.views import ClusterView
from flows.cli._common import JsonOption, console_client, emit_json, fields, stdout, table

app = typer.Typer(help="Clusters: what each cluster's collector reported, and its warnings.")


@app.command("list")
def list_clusters(as_json: JsonOption = False) -> None:
    """Every cluster of the environment."""
    with console_client() as client:
        clusters = client.clusters()
    if as_json:
        emit_json(clusters)
        return
    rows = [
        (
            c.slug,
            c.name,
            c.registered,
            c.kubernetes_version,
            c.node_agents,
            c.last_inventory_at,
            [w.kind for w in c.warnings],
        )
        for c in clusters
    ]
    columns = ("slug", "name", "registered", "kubernetes", "node agents", "last sync", "warnings")
    stdout.print(table(f"{len(clusters)} clusters", columns, rows))


def render(cluster: ClusterView) -> Group:
    summary = fields(
        f"cluster {cluster.name}",
        [
            ("slug", cluster.slug),
            ("id", cluster.id),
            ("registered", cluster.registered),
            ("created", cluster.created_at),
            ("kubernetes", cluster.kubernetes_version),
            ("first sync", cluster.first_inventory_at),
            ("last sync", cluster.last_inventory_at),
            ("sync interval", cluster.sync_interval_seconds),
            ("expected interval", cluster.backend_sync_interval_seconds),
            ("counts", cluster.counts),
            ("node agents", cluster.node_agents),
            ("errors", cluster.errors),
        ],
    )
    collectors = table(
        "collectors",
        ("id", "name", "leader", "last status", "version", "reported slug"),
        [
            (a.id, a.name, a.leader, a.status_seen_at, a.version, a.reported_slug)
            for a in cluster.agents
        ],
    )
    warnings = table(
        f"{len(cluster.warnings)} warnings",
        ("kind", "message"),
        [(w.kind, w.message) for w in cluster.warnings],
    )
    return Group(summary, collectors, warnings)


@app.command()
def show(
    slug: Annotated[str, typer.Argument(help="The cluster's slug.")],
    as_json: JsonOption = False,
) -> None:
    """One cluster: its last inventory sync, its collectors and its warnings."""
    with console_client() as client:
        cluster = client.cluster(slug)
    if as_json:
        emit_json(cluster)
    else:
        stdout.print(render(cluster))
