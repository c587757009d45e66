"""``proxima-fleet``: the operator's entry point to the control plane."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Proxima fleet control plane.", no_args_is_help=True)


@app.command()
def demo(
    agents: Annotated[int, typer.Option(envvar="PROXIMA_DEMO_AGENTS", min=1, max=50)] = 5,
    heartbeat: Annotated[str, typer.Option(envvar="PROXIMA_DEMO_HEARTBEAT")] = "1s",
    workdir: Annotated[Path, typer.Option(envvar="PROXIMA_DEMO_DIR")] = Path(".proxima/demo"),
    hold: Annotated[
        float, typer.Option(help="Seconds to keep showing the fleet once online")
    ] = 3.0,
) -> None:
    """Run a local fleet: a Console, its NATS, and several real agents, shown live."""
    from flows.demo import run_demo

    raise typer.Exit(run_demo(agents=agents, heartbeat=heartbeat, workdir=workdir, hold=hold))


@app.callback()
def _root() -> None:
    """Proxima fleet control plane."""


def main() -> None:
    app()
