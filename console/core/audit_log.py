"""The access and audit log: one line per authentication failure, token change and identity
change, on the logger ``proxima.audit``.

Each line carries an ``event`` and flat fields a log shipper can index (with
``PROXIMA_LOG_FORMAT=json`` they are keys of the JSON object; in plain format ``key=value``
pairs). Never a secret: tokens appear by id and display prefix (the 10 characters the token
lists show), keys by their public half; the callers pass nothing else.
"""

from __future__ import annotations

import logging

from starlette.requests import Request

__all__ = ["AUDIT_LOGGER", "Field", "audit", "audit_refusal", "client_address"]

AUDIT_LOGGER = "proxima.audit"
_log = logging.getLogger(AUDIT_LOGGER)

Field = str | int | float | bool | list[str] | None


def _plain(value: Field) -> str:
    if isinstance(value, list):
        return ",".join(value) or "-"
    return "-" if value is None else str(value).replace(" ", "_")


def audit(event: str, /, **fields: Field) -> None:
    """Log ``event`` with ``fields`` (a change made: sign-in, token minted, agent enrolled)."""
    _emit(logging.INFO, event, fields)


def audit_refusal(event: str, /, **fields: Field) -> None:
    """Log a refusal (failed authentication, rate limit) as a warning."""
    _emit(logging.WARNING, event, fields)


def _emit(level: int, event: str, fields: dict[str, Field]) -> None:
    message = " ".join([event, *(f"{k}={_plain(v)}" for k, v in fields.items())])
    _log.log(level, message, extra={"audit": {"event": event, **fields}})


def client_address(request: Request) -> str:
    """The caller's address: the connection's peer, or the client X-Forwarded-For names when
    the peer is one of ``PROXIMA_TRUSTED_PROXIES`` (``console.app``); never a header's word
    from anyone else."""
    return request.client.host if request.client else "unknown"
