"""Wire formats shared by the agent, the Console and the flows.

Only stdlib and pydantic live here: every process imports this package, so it must stay small.
"""

from contracts.durations import DurationError, format_duration, parse_duration

__all__ = ["DurationError", "format_duration", "parse_duration"]

VERSION = "0.8.0"
