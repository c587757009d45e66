"""``proxima-fleet``: the operator's entry point to the control plane."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Proxima fleet control plane.", no_args_is_help=True)


@app.command()
def demo(
    agents: Annotated[int, typer.Option(envvar="PROXIMA_DEMO_AGENTS", min=1, max=50)] = 5,
    workdir: Annotated[Path, typer.Option(envvar="PROXIMA_DEMO_DIR")] = Path(".proxima/demo"),
    keep: Annotated[
        bool, typer.Option(help="Keep everything running at the end (for the Prefect UI)")
    ] = False,
) -> None:
    """Run a local fleet (Prefect, a Console, its NATS, real agents) and roll it from 0.8.0 to
    0.9.0 through the fleet-rollout flow, shown live."""
    from flows.demo import run_demo

    raise typer.Exit(run_demo(agents=agents, workdir=workdir, keep=keep))


@app.callback()
def _root() -> None:
    """Proxima fleet control plane."""


def main() -> None:
    app()
