"""What the web pages raise besides ``console.errors.ConsoleError`` (which they render too).

PageError          an error page with a status, a stable reason and a message
└── CsrfError      403: a POST without this session's CSRF token
SignInRequired     not an error page: a redirect to /sign-in (no session, or its API token
                   stopped being valid — ``reason`` says which)
"""

from __future__ import annotations

__all__ = ["CsrfError", "PageError", "SignInRequired"]


class PageError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


class CsrfError(PageError):
    def __init__(self, message: str) -> None:
        super().__init__(403, "csrf_failed", message)


class SignInRequired(Exception):
    def __init__(self, next_path: str, reason: str | None = None) -> None:
        super().__init__(reason or "sign in")
        self.next_path = next_path
        self.reason = reason
