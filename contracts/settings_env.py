"""How the three programs read ``PROXIMA_*`` variables: one-line errors for bad values and a
warning for a variable that is not a setting but looks like one (a misspelling is otherwise
silently ignored, the setting keeps its default, and nobody knows why).

The programs share one prefix, and one shell often configures several of them, so a variable
is reported only when it is close to one of *this* program's settings and is not itself a
setting of this program (``tests/contracts/test_settings_env.py`` checks that no program's own
variables look misspelt to another).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ValidationError

PREFIX = "PROXIMA_"

#: Settings of one program that are a letter or two from another program's: never reported.
#: ``tests/contracts/test_settings_env.py`` keeps this exactly the colliding names.
OTHER_PROGRAMS_SETTINGS = frozenset(
    {
        "PROXIMA_K8S_SYNC_INTERVAL",  # the Console's; the agent has PROXIMA_SYNC_INTERVAL
        "PROXIMA_SYNC_INTERVAL",
        "PROXIMA_SIGNING_PUBLIC_KEYS",  # the Console's; the agent has PROXIMA_SIGNING_PUBLIC_KEY
        "PROXIMA_SIGNING_PUBLIC_KEY",
        "PROXIMA_SIGNING_PUBLIC_KEY_FILE",  # the agent's
    }
)

__all__ = [
    "OTHER_PROGRAMS_SETTINGS",
    "PREFIX",
    "describe_invalid",
    "misspelt",
    "variable_names",
]


def variable_names(settings: type[BaseModel], prefix: str = PREFIX) -> frozenset[str]:
    """The environment variables a pydantic-settings class reads."""
    return frozenset(f"{prefix}{name.upper()}" for name in settings.model_fields)


def describe_invalid(error: ValidationError, prefix: str = PREFIX) -> str:
    """``PROXIMA_PORT='abc': Input should be a valid integer…`` for each error, on one line."""
    parts = []
    for item in error.errors(include_url=False):
        field = str(item["loc"][0]).upper() if item["loc"] else "SETTINGS"
        message = str(item["msg"]).removeprefix("Value error, ")
        value = item.get("input")
        plain = isinstance(value, str | int | float) and len(str(value)) < 80
        shown = f"={value!r}" if plain else ""
        parts.append(f"{prefix}{field}{shown}: {message}")
    return "; ".join(parts)


def misspelt(
    environ: Mapping[str, str], known: Iterable[str], prefix: str = PREFIX
) -> list[tuple[str, str]]:
    """``(variable, the setting it probably means)`` for each ``prefix`` variable that is not a
    setting in ``known`` but is one or two letters away from one."""
    names = sorted(known)
    found = []
    for variable in sorted(environ):
        if not variable.startswith(prefix) or variable in names:
            continue
        if variable in OTHER_PROGRAMS_SETTINGS:
            continue
        close = difflib.get_close_matches(variable, names, n=1, cutoff=0.88)
        if close:
            found.append((variable, close[0]))
    return found
