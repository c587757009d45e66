"""The one shape of every Proxima CLI's errors (``proxima-agent``, ``proxima-console``,
``proxima-fleet``): exactly one line ``<program>: error: <message>`` on stderr, and an exit
status from one table (docs/agent.md, docs/console.md, docs/flows.md):

====  ===========================================================================
0     done
1     the operation failed or was refused (and, for an unexpected exception, a bug)
2     usage or configuration: unknown option, bad argument, bad setting
3+    program-specific (the agent's state-file and environment codes)
====  ===========================================================================

Warnings take the same form with ``warning`` for ``error``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import typer

# Typer vendors click; its exceptions are only reachable under this private name.
from typer._click import exceptions as click_errors

EXIT_FAILURE = 1
EXIT_USAGE = 2

Translate = Callable[[Exception], tuple[str, int] | None]
"""A program's own exceptions → (message, exit status); ``None``: not one of them."""


def one_line(message: str) -> str:
    """Every line of ``message`` joined into one (tracebacks never reach here)."""
    return " ".join(ln.strip() for ln in message.splitlines() if ln.strip())


def error(program: str, message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """``<program>: error: <message>`` on stderr, then exit with ``code``."""
    sys.stderr.write(f"{program}: error: {one_line(message)}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def warning(program: str, message: str) -> None:
    sys.stderr.write(f"{program}: warning: {one_line(message)}\n")
    sys.stderr.flush()


def run(
    app: typer.Typer,
    program: str,
    argv: Sequence[str] | None = None,
    *,
    translate: Translate | None = None,
) -> None:
    """Run ``app`` as ``program``: usage errors, aborts and unexpected exceptions all end
    with one error line (click would print a usage block, Python a traceback)."""
    command = typer.main.get_command(app)
    try:
        status = command.main(
            args=list(argv) if argv is not None else None,
            prog_name=program,
            standalone_mode=False,
        )
    except click_errors.NoArgsIsHelpError as e:
        sys.stdout.write(e.format_message() + "\n")
        error(program, "no command given (see --help)", EXIT_USAGE)
    except click_errors.UsageError as e:
        where = program
        if e.ctx is not None and e.ctx.command_path:
            where = e.ctx.command_path
        error(program, f"{e.format_message()} (see {where} --help)", EXIT_USAGE)
    except click_errors.ClickException as e:
        error(program, e.format_message(), e.exit_code or EXIT_USAGE)
    except (typer.Abort, EOFError):
        error(program, "aborted", 130)
    except typer.Exit as e:
        raise SystemExit(e.exit_code) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except Exception as e:  # the last line of defence: still one line, still non-zero
        known = translate(e) if translate else None
        if known is not None:
            error(program, *known)
        error(program, f"internal error: {e.__class__.__name__}: {e}", EXIT_FAILURE)
    # Without standalone mode click answers a raised typer.Exit with its status (and a
    # command's return value otherwise: every command here returns None).
    if isinstance(status, int) and not isinstance(status, bool) and status:
        raise SystemExit(status)
