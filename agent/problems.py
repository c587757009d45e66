"""Failures a periodic loop reports once: when one starts or changes, and when it ends.

A kubelet answering 403 every minute, or an API server down for an hour, is one event to an
operator, not sixty log lines. :class:`ProblemLog` remembers the failure it last reported (a
key such as ``"http 403"``) and logs again only for a different one, or for the recovery.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["ProblemLog"]


class ProblemLog:
    """The failure state of one thing a loop keeps trying (the kubelet, the API server)."""

    def __init__(self, logger: logging.Logger) -> None:
        self._log = logger
        self.current: str | None = None
        self.failures = 0  # attempts that failed since the last success

    @property
    def failing(self) -> bool:
        return self.current is not None

    def failed(
        self,
        key: str,
        message: str,
        *args: Any,
        level: int = logging.WARNING,
        exc_info: bool = False,
    ) -> bool:
        """Log ``message`` if ``key`` is not the failure already reported; True if logged."""
        self.failures += 1
        if key == self.current:
            self._log.debug("still failing (%d attempts): %s", self.failures, key)
            return False
        self.current = key
        self._log.log(level, message, *args, exc_info=exc_info)
        return True

    def recovered(self, message: str, *args: Any) -> bool:
        """Log ``message`` (info) if a failure was reported; True if logged."""
        self.failures = 0
        if self.current is None:
            return False
        self.current = None
        self._log.info(message, *args)
        return True
