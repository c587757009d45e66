"""What the web pages raise besides ``console.errors.ConsoleError`` (which they render too).

PageError          an error page with a status, a stable reason and a message
└── CsrfError      403: a POST without this session's CSRF token
SignInRequired     not an error page: a redirect to /sign-in (no session, or its API token
                   stopped being valid — ``reason`` says which)
"""

from __future__ import annotations

from contracts.vocabulary import ErrorReason

__all__ = ["CsrfError", "PageError", "SignInRequired"]


class PageError(Exception):
    def __init__(self, status: int, reason: ErrorReason, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = ErrorReason(reason)
        self.message = message


class CsrfError(PageError):
    def __init__(self, message: str) -> None:
        super().__init__(403, ErrorReason.CSRF_FAILED, message)


class SignInRequired(Exception):
    def __init__(self, next_path: str, reason: ErrorReason | None = None) -> None:
        super().__init__(reason or "sign in")
        self.next_path = next_path
        self.reason = reason
