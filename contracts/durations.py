"""Durations written the way the chart writes them: ``30s``, ``5m``, ``1h30m``, ``250ms``."""

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class DurationError(ValueError):
    """A duration string that does not parse; ``text`` is what was given."""

    def __init__(self, text: str) -> None:
        super().__init__(
            f"invalid duration {text!r}: use a number with a unit, like 30s, 5m, 1h or 250ms"
        )
        self.text = text


def parse_duration(text: str | float | int) -> float:
    """Seconds in ``text``. A bare number is seconds."""
    if isinstance(text, int | float):
        if text < 0:
            raise DurationError(str(text))
        return float(text)
    raw = text.strip()
    if not raw:
        raise DurationError(text)
    try:
        value = float(raw)
    except ValueError:
        pass
    else:
        if value < 0:
            raise DurationError(text)
        return value
    pos = 0
    total = 0.0
    for match in _PART.finditer(raw):
        if match.start() != pos:
            raise DurationError(text)
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(raw) or pos == 0:
        raise DurationError(text)
    return total


def format_duration(seconds: float) -> str:
    """The shortest chart-style spelling of ``seconds`` (``300`` → ``5m``)."""
    if seconds < 1 and seconds > 0:
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    if whole and whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole and whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"
