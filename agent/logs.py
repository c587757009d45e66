"""Logging setup: plain or JSON lines on stderr, with secrets masked as a last line of defence.

Modules log with ``logging.getLogger(__name__)`` and lazy ``%s`` arguments. Nothing should ever
pass a seed or token to a logger; :class:`SecretMask` catches the mistake if someone does.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, TextIO

from agent.settings import LogFormat, LogLevel

__all__ = ["JsonFormatter", "SecretMask", "configure_logging"]

# nkey seeds: 'S' + key type + 56 base32 characters.
_SEED = re.compile(r"S[ACNOPUX][A-Z2-7]{56}")
_MASK = "[redacted]"


class SecretMask(logging.Filter):
    """Masks nkey seeds and any registered literal secret (the install token) in records."""

    def __init__(self) -> None:
        super().__init__()
        self._literals: set[str] = set()

    def add(self, secret: str) -> None:
        if len(secret) >= 8:
            self._literals.add(secret)

    def _clean(self, text: str) -> str:
        text = _SEED.sub(_MASK, text)
        for secret in self._literals:
            text = text.replace(secret, _MASK)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = self._clean(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            # Formatted tracebacks are cached on the record; mask that text too.
            formatter = logging.Formatter()
            record.exc_text = self._clean(formatter.formatException(record.exc_info))
            record.exc_info = None
        return True


def _timestamp(record: logging.LogRecord) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{seconds}.{int(record.msecs):03d}Z"


class PlainFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if record.exc_text:
            line += "\n" + record.exc_text
        elif record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg`` (+ ``exc``)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_text:
            data["exc"] = record.exc_text
        elif record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


_mask = SecretMask()


def configure_logging(
    level: LogLevel, fmt: LogFormat, *, stream: TextIO | None = None
) -> SecretMask:
    """Install one stderr handler on the root logger; returns the mask to register secrets."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt is LogFormat.JSON else PlainFormatter())
    handler.addFilter(_mask)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.value.upper())
    # Library chatter stays at warning unless we debug.
    quiet = logging.DEBUG if level is LogLevel.DEBUG else logging.WARNING
    for name in ("httpx", "httpcore", "nats", "asyncio"):
        logging.getLogger(name).setLevel(quiet)
    return _mask
