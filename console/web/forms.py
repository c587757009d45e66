"""HTML form bodies (application/x-www-form-urlencoded) and their CSRF check.

Every POST a page makes carries the session's CSRF token in the ``csrf_token`` field (or, from
scripts, the ``X-CSRF-Token`` header); it is compared in constant time. The sign-in form, which
has no session yet, carries a nonce that must match a signed cookie set with the form
(double-submit), so another site cannot sign a browser in under its own token.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs

from fastapi import Request

from console.web.errors import CsrfError, PageError
from contracts.vocabulary import ErrorReason

__all__ = ["CSRF_FIELD", "CSRF_HEADER", "Form", "check_csrf", "read_form"]

CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
_FORM_TYPE = "application/x-www-form-urlencoded"


class Form:
    """Decoded fields; every value is a string, repeated fields keep their order."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self._fields = fields

    def get(self, name: str, default: str = "") -> str:
        values = self._fields.get(name)
        return values[0].strip() if values else default

    def getlist(self, name: str) -> list[str]:
        return [v.strip() for v in self._fields.get(name, [])]

    def flag(self, name: str) -> bool:
        return self.get(name) in ("1", "on", "true", "yes")

    def __contains__(self, name: object) -> bool:
        return name in self._fields


async def read_form(request: Request) -> Form:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if body and content_type != _FORM_TYPE:
        raise PageError(415, ErrorReason.UNSUPPORTED_FORM, f"send forms as {_FORM_TYPE}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PageError(400, ErrorReason.MALFORMED_FORM, "the form is not UTF-8") from exc
    return Form(parse_qs(text, keep_blank_values=True, max_num_fields=200))


def check_csrf(request: Request, form: Form, expected: str) -> None:
    presented = form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER, "")
    if not presented:
        raise CsrfError("this form carries no CSRF token: reload the page and submit it again")
    if not hmac.compare_digest(presented.encode(), expected.encode()):
        raise CsrfError(
            "this form's CSRF token does not belong to your session (it expired, or the form "
            "came from another site): reload the page and submit it again"
        )
