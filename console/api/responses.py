"""OpenAPI documentation of the error answers: every 4xx/5xx body is an ``ErrorBody``."""

from contracts.enrollment import ErrorBody


def errors(*codes: int) -> dict[int | str, dict[str, object]]:
    """``responses=`` for a route that can answer with these error codes."""
    return {code: {"model": ErrorBody} for code in codes}
