"""``proxima-agent``: ``run``, ``status``, ``version``.

Every flag has a ``PROXIMA_*`` environment variable (see ``docs/agent.md``); a flag wins over
its variable. Every failure exits non-zero with one line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent import __version__
from agent.errors import AgentError, EnvironmentProblemError, NotEnrolledError
from agent.settings import DEFAULT_DATA_DIR, ENV_PREFIX
from contracts.cli_errors import run as run_cli

if TYPE_CHECKING:
    from agent.settings import AgentSettings

__all__ = ["app", "main"]

app = typer.Typer(
    name="proxima-agent",
    help="Proxima fleet agent: enrolls with the Console, heartbeats over NATS, runs commands.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _env(name: str) -> str:
    return f"[env: {ENV_PREFIX}{name}]"


@app.command()
def run(
    agent_type: Annotated[
        str | None,
        typer.Option(
            "--agent-type",
            help=f"host|k8s-node-monitor|k8s-cluster-collector (default host) {_env('AGENT_TYPE')}",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help=f"Agent name; default: the hostname {_env('AGENT_NAME')}"),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            help=f"Holds state.json (default /var/lib/proxima-agent) {_env('DATA_DIR')}",
        ),
    ] = None,
    backend_url: Annotated[
        str | None,
        typer.Option("--backend-url", help=f"Console URL {_env('BACKEND_URL')}"),
    ] = None,
    install_token: Annotated[
        str | None,
        typer.Option(
            "--install-token",
            help=f"Install token (shows in ps: prefer env or file) {_env('INSTALL_TOKEN')}",
        ),
    ] = None,
    install_token_file: Annotated[
        Path | None,
        typer.Option(
            "--install-token-file",
            help=f"File with the install token, read per attempt {_env('INSTALL_TOKEN_FILE')}",
        ),
    ] = None,
    host_root: Annotated[
        Path | None,
        typer.Option(
            "--host-root",
            help=f"Where the host's / is mounted (default /) {_env('HOST_ROOT')}",
        ),
    ] = None,
    heartbeat_interval: Annotated[
        str | None,
        typer.Option(
            "--heartbeat-interval", help=f"e.g. 30s, 5m (default 30s) {_env('HEARTBEAT_INTERVAL')}"
        ),
    ] = None,
    metrics_interval: Annotated[
        str | None,
        typer.Option("--metrics-interval", help=f"(default 60s) {_env('METRICS_INTERVAL')}"),
    ] = None,
    host_metrics: Annotated[
        bool | None,
        typer.Option(
            "--host-metrics/--no-host-metrics",
            help=f"Publish host metrics (default on) {_env('HOST_METRICS')}",
            show_default=False,
        ),
    ] = None,
    health_host: Annotated[
        str | None,
        typer.Option("--health-host", help=f"(default 127.0.0.1) {_env('HEALTH_HOST')}"),
    ] = None,
    health_port: Annotated[
        int | None,
        typer.Option(
            "--health-port", help=f"(default 8181; 0 picks a free port) {_env('HEALTH_PORT')}"
        ),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option("--log-level", help=f"debug|info|warning|error {_env('LOG_LEVEL')}"),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option("--log-format", help=f"plain|json {_env('LOG_FORMAT')}"),
    ] = None,
    labels: Annotated[
        str | None,
        typer.Option("--labels", help=f"k=v,k=v {_env('LABELS')}"),
    ] = None,
    enroll_backoff_max: Annotated[
        str | None,
        typer.Option(
            "--enroll-backoff-max",
            help=f"Longest enrollment retry wait (default 60s) {_env('ENROLL_BACKOFF_MAX')}",
        ),
    ] = None,
    nats_reconnect_wait: Annotated[
        str | None,
        typer.Option(
            "--nats-reconnect-wait",
            help=f"First wait before reconnecting (default 1s) {_env('NATS_RECONNECT_WAIT')}",
        ),
    ] = None,
    nats_reconnect_max_wait: Annotated[
        str | None,
        typer.Option(
            "--nats-reconnect-max-wait",
            help=f"Longest wait between reconnects (default 30s) {_env('NATS_RECONNECT_MAX_WAIT')}",
        ),
    ] = None,
    nats_reconnect_jitter: Annotated[
        float | None,
        typer.Option(
            "--nats-reconnect-jitter",
            help=f"Random share of each wait, 0-1 (default 0.2) {_env('NATS_RECONNECT_JITTER')}",
        ),
    ] = None,
    result_ack_timeout: Annotated[
        str | None,
        typer.Option(
            "--result-ack-timeout",
            help=f"How long to wait for the Console to acknowledge a command result (default "
            f"5s) {_env('RESULT_ACK_TIMEOUT')}",
        ),
    ] = None,
    result_retry_max: Annotated[
        str | None,
        typer.Option(
            "--result-retry-max",
            help=f"Longest wait between sends of an unacknowledged result (default 30s) "
            f"{_env('RESULT_RETRY_MAX')}",
        ),
    ] = None,
    signing_public_key: Annotated[
        str | None,
        typer.Option(
            "--signing-public-key",
            help=f"Fleet build-signing key (base64url ed25519) {_env('SIGNING_PUBLIC_KEY')}",
        ),
    ] = None,
    signing_public_key_file: Annotated[
        Path | None,
        typer.Option(
            "--signing-public-key-file",
            help=f"File holding the signing key {_env('SIGNING_PUBLIC_KEY_FILE')}",
        ),
    ] = None,
    program_path: Annotated[
        Path | None,
        typer.Option(
            "--program-path",
            help=f"The build self_update replaces (default: the running zipapp) "
            f"{_env('PROGRAM_PATH')}",
        ),
    ] = None,
    update_health_timeout: Annotated[
        str | None,
        typer.Option(
            "--update-health-timeout",
            help=f"How long a new build has to become healthy (default 60s) "
            f"{_env('UPDATE_HEALTH_TIMEOUT')}",
        ),
    ] = None,
) -> None:
    """Enroll (once), then stay connected: heartbeats, host metrics, commands."""
    from agent.settings import build_settings

    settings = build_settings(
        agent_type=agent_type,
        agent_name=name,
        data_dir=data_dir,
        backend_url=backend_url,
        install_token=install_token,
        install_token_file=install_token_file,
        host_root=host_root,
        heartbeat_interval=heartbeat_interval,
        metrics_interval=metrics_interval,
        host_metrics=host_metrics,
        health_host=health_host,
        health_port=health_port,
        log_level=log_level,
        log_format=log_format,
        labels=labels,
        enroll_backoff_max=enroll_backoff_max,
        nats_reconnect_wait=nats_reconnect_wait,
        nats_reconnect_max_wait=nats_reconnect_max_wait,
        nats_reconnect_jitter=nats_reconnect_jitter,
        result_ack_timeout=result_ack_timeout,
        result_retry_max=result_retry_max,
        signing_public_key=signing_public_key,
        signing_public_key_file=signing_public_key_file,
        program_path=program_path,
        update_health_timeout=update_health_timeout,
    )
    _start(settings)


def warn_misspelt_variables() -> None:
    import logging

    from agent.settings import AgentSettings
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
        Path | None,
        typer.Option("--data-dir", help=f"(default /var/lib/proxima-agent) {_env('DATA_DIR')}"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Print this agent's identity from state.json (never the private key)."""
    from agent.state import StateStore

    # Only the data directory matters here: other (possibly broken) settings must not stop
    # an operator from reading the identity.
    directory = data_dir or Path(os.environ.get(f"{ENV_PREFIX}DATA_DIR") or DEFAULT_DATA_DIR)
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
