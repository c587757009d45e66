"""``proxima-agent``: ``run``, ``status``, ``version``.

Every flag has a ``PROXIMA_*`` environment variable (see ``docs/agent.md``); a flag wins over
its variable. Every failure exits non-zero with one line on stderr.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, get_args

import typer

from agent import __version__
from agent.errors import AgentError, EnvironmentProblemError, NotEnrolledError
from agent.settings import (
    DEFAULT_DATA_DIR,
    ENV_PREFIX,
    AgentSettings,
    default_text,
    flags,
    is_duration,
)
from contracts.cli_errors import run as run_cli

__all__ = ["app", "main"]

app = typer.Typer(
    name="proxima-agent",
    help="Proxima fleet agent: enrolls with the Console, heartbeats over NATS, runs commands.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _help(field: str) -> str:
    """A flag's help from its setting: the description, the choices of an enum, the default
    (shown once, from the field), the variable."""
    info = AgentSettings.model_fields[field]
    text = info.description or ""
    if isinstance(info.annotation, type) and issubclass(info.annotation, StrEnum):
        text += ": " + "|".join(member.value for member in info.annotation)
    if (default := default_text(field)) is not None:
        text += f" (default {default})"
    return f"{text} [env: {ENV_PREFIX}{field.upper()}]"


def _metavar(field: str) -> str:
    if is_duration(field):
        return "<duration>"
    info = AgentSettings.model_fields[field]
    kinds = set(get_args(info.annotation)) or {info.annotation}
    for kind, name in ((Path, "<path>"), (int, "<int>"), (float, "<number>")):
        if kind in kinds:
            return name
    return "<str>"


def _option(field: str) -> inspect.Parameter:
    """``--flag`` for setting ``field``, given as text (the settings parse it as they parse
    its variable) or, for a switch, ``--x/--no-x``; ``None`` when not given."""
    flag = flags()[field]
    if AgentSettings.model_fields[field].annotation is bool:
        option = typer.Option(f"{flag}/--no-{flag[2:]}", help=_help(field), show_default=False)
        annotation: Any = Annotated[bool | None, option]
    else:
        option = typer.Option(flag, help=_help(field), metavar=_metavar(field))
        annotation = Annotated[str | None, option]
    return inspect.Parameter(
        field, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def run(**given: Any) -> None:
    """Enroll (once), then stay connected: heartbeats, host metrics, commands."""
    from agent.settings import build_settings

    _start(build_settings(**given))


# One option per flagged setting of AgentSettings: a flag, its help and its default are written
# once, on the field.
run.__signature__ = inspect.Signature([_option(field) for field in flags()])  # type: ignore[attr-defined]
app.command()(run)


def warn_misspelt_variables() -> None:
    import logging

    from contracts.settings_env import misspelt, variable_names

    for variable, meant in misspelt(os.environ, variable_names(AgentSettings)):
        logging.getLogger("agent").warning(
            "%s is not a setting of proxima-agent and is ignored; did you mean %s?",
            variable,
            meant,
        )


def _start(settings: AgentSettings) -> None:
    """Run the agent (or, under a self_update, the trial of a new build) until it stops; exec
    the build it hands over to, if any."""
    from agent.logs import configure_logging

    mask = configure_logging(settings.log_level, settings.log_format)
    warn_misspelt_variables()
    if settings.install_token is not None:
        mask.add(settings.install_token.get_secret_value())
    _keep_websocket_client_out()
    # Imported before anything runs: once a self_update has swapped the zipapp on disk, this
    # process must not import from it again (zipimport would read the new file's bytes).
    from agent.runtime import AgentRuntime
    from agent.selfupdate.handover import exec_program, recover_failed_exec
    from agent.selfupdate.trial import TRIAL_ENV, TrialChild, trial_parent

    trial = trial_parent(os.environ.get(TRIAL_ENV))
    if trial is not None:
        asyncio.run(TrialChild(settings, *trial).run())
        return
    runtime = AgentRuntime(settings)
    asyncio.run(runtime.run())
    if runtime.exec_request is not None:
        try:
            exec_program(runtime.exec_request)
        except OSError as e:
            recover_failed_exec(settings.data_dir, e)
            raise EnvironmentProblemError(
                f"exec {runtime.exec_request.argv[0]}", e.strerror or str(e)
            ) from None


def _keep_websocket_client_out() -> None:
    """nats-py imports aiohttp when it is installed (for ws:// servers, which the agent does
    not use): 12 MiB of resident memory for nothing. Make the optional import fail."""
    sys.modules.setdefault("aiohttp", None)  # type: ignore[arg-type]


@app.command()
def status(
    data_dir: Annotated[
        str | None, typer.Option("--data-dir", help=_help("data_dir"), metavar="<path>")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Print this agent's identity from state.json (never the private key)."""
    from agent.state import StateStore

    # Only the data directory matters here: other (possibly broken) settings must not stop
    # an operator from reading the identity.
    directory = Path(data_dir or os.environ.get(f"{ENV_PREFIX}DATA_DIR") or DEFAULT_DATA_DIR)
    store = StateStore(directory)
    state = store.read()
    if state is None:
        raise NotEnrolledError(store.path)
    view = {"state_file": str(store.path), **state.public_view()}
    if as_json:
        sys.stdout.write(json.dumps(view, indent=2) + "\n")
        return
    width = max(len(k) for k in view)
    for key, value in view.items():
        sys.stdout.write(f"{key:<{width}}  {'-' if value is None else value}\n")


@app.command()
def version(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Print the agent version."""
    if as_json:
        from agent import build_info
        from agent.selfupdate.handover import SELF_UPDATE_PROTOCOL

        info = {
            "version": __version__,
            "self_update_protocol": SELF_UPDATE_PROTOCOL,
            "build": build_info() or None,
        }
        sys.stdout.write(json.dumps(info) + "\n")
        return
    sys.stdout.write(f"proxima-agent {__version__}\n")


def _agent_error(e: Exception) -> tuple[str, int] | None:
    return (str(e), int(e.exit_code)) if isinstance(e, AgentError) else None


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: one line on stderr and a non-zero exit for every failure
    (the shape and table every Proxima CLI shares: contracts.cli_errors)."""
    run_cli(app, "proxima-agent", argv, translate=_agent_error)
