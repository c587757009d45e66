"""``proxima-fleet audit``: the latest fleet-audit run and its findings.

Starting a run is the ``fleet-audit`` Prefect deployment's job (schedule or Prefect UI), not
this command's: it needs Prefect, which the Console API does not front."""

from __future__ import annotations

import typer
from rich.console import Group

from contracts.audit import Severity
from flows.cli._common import JsonOption, console_client, emit_json, fields, stdout, table

app = typer.Typer(help="Fleet audit: what the latest fleet-audit run found.")


@app.command()
def show(as_json: JsonOption = False) -> None:
    """The latest audit run: its summary and every finding, worst first."""
    with console_client() as client:
        run = client.latest_audit()
    if as_json:
        emit_json(run)
        return
    order = list(Severity)
    findings = sorted(run.findings or [], key=lambda f: order.index(f.severity))
    summary = fields(
        f"audit {run.id}",
        [("at", run.created_at), ("flow run", run.flow_run_id), ("summary", run.summary)],
    )
    rows = [
        (f.severity, f.name, f.subject_name or f.subject_id, f.message, f.fix) for f in findings
    ]
    listing = table(
        f"{len(findings)} findings", ("severity", "finding", "subject", "message", "fix"), rows
    )
    stdout.print(Group(summary, listing))
