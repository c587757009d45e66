"""Plain or JSON log lines."""

import json
import logging
import sys


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "audit", None)
        if isinstance(fields, dict):  # console.core.audit_log: its fields as keys
            entry.update({k: v for k, v in fields.items() if k not in entry})
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class OneLineStartupFailure(logging.Filter):
    """uvicorn logs a failed startup as the whole traceback and then "Application startup
    failed. Exiting.": keep one line, the exception's own, so the operator reads the reason."""

    reason: str | None = None
    """The last start-up failure's line, for the CLI's closing error line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Application startup failed"):
            return False
        if "Traceback (most recent call last)" in message:
            last = [ln for ln in message.splitlines() if ln.strip()][-1]
            self.reason = last.strip()
            record.msg, record.args = f"startup failed: {self.reason}", None
            record.exc_info = record.exc_text = None
        return True
