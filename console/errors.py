"""Errors the Console answers with. Each carries the HTTP status, a stable ``reason`` for
machines (an :class:`~contracts.vocabulary.ErrorReason`, never a free string) and a ``message``
for people; the app renders them as ``contracts.enrollment.ErrorBody``.

    ConsoleError
    ├── BadRequestError            400
    ├── UnauthorizedError          401  no or unknown credentials
    ├── ForbiddenError             403  known credentials, not allowed
    ├── NotFoundError              404
    ├── ConflictError              409  enrollment clash, refused release, …
    ├── PayloadTooLargeError       413
    ├── TooManyRequestsError       429  rate limited (carries ``retry_after`` seconds)
    ├── ServiceUnavailableError    503  a dependency is down (``database_unavailable``)
    └── GatewayTimeoutError        504  an agent did not answer in time
"""

from typing import ClassVar

from contracts.vocabulary import ErrorReason


class ConsoleError(Exception):
    status: ClassVar[int] = 400

    def __init__(self, reason: ErrorReason, message: str, *, agent_id: str | None = None) -> None:
        super().__init__(message)
        self.reason = ErrorReason(reason)
        self.message = message
        self.agent_id = agent_id


class BadRequestError(ConsoleError):
    status = 400


class UnauthorizedError(ConsoleError):
    status = 401


class ForbiddenError(ConsoleError):
    status = 403


class NotFoundError(ConsoleError):
    status = 404


class ConflictError(ConsoleError):
    status = 409


class PayloadTooLargeError(ConsoleError):
    status = 413


class TooManyRequestsError(ConsoleError):
    status = 429

    def __init__(self, reason: ErrorReason, message: str, *, retry_after: int) -> None:
        super().__init__(reason, message)
        self.retry_after = retry_after


class ServiceUnavailableError(ConsoleError):
    """A dependency (the database) is down: retry later. Raised by the unit of work."""

    status = 503


class GatewayTimeoutError(ConsoleError):
    status = 504
