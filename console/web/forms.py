"""HTML form bodies (application/x-www-form-urlencoded) and their CSRF check.

Every POST a page makes carries the session's CSRF token in the ``csrf_token`` field (or, from
scripts, the ``X-CSRF-Token`` header); it is compared in constant time. The sign-in form, which
has no session yet, carries a nonce that must match a signed cookie set with the form
(double-submit), so another site cannot sign a browser in under its own token.

A refused form is drawn again with each message beside its field (``FieldErrors``): the API's
model validates the body, and the locations of its errors (the 422 ``detail`` an API client
gets) are mapped onto the form's fields; what belongs to no field is shown above the form.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs

from fastapi import Request
from pydantic import ValidationError

from console.web.errors import CsrfError, PageError
from contracts.vocabulary import ErrorReason

__all__ = [
    "CSRF_FIELD",
    "CSRF_HEADER",
    "FORM_WIDE",
    "FieldErrors",
    "Form",
    "check_csrf",
    "field_by_prefix",
    "read_form",
]

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


FORM_WIDE = ""
Loc = tuple[str | int, ...]


class FieldErrors(dict[str, list[str]]):
    """Messages by form field name; ``FORM_WIDE`` holds those that belong to no one field."""

    def add(self, field: str, message: str) -> None:
        self.setdefault(field, []).append(message)

    def add_validation(self, exc: ValidationError, field_of: Callable[[Loc], str | None]) -> None:
        """Each error of the model's validation beside the field ``field_of`` names for its
        location (else form-wide, with its location so it can still be found)."""
        for err in exc.errors():
            loc: Loc = tuple(err.get("loc", ()))
            message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            field = field_of(loc)
            if field is None:
                where = ".".join(str(p) for p in loc)
                self.add(FORM_WIDE, f"{where}: {message}" if where else message)
            else:
                self.add(field, message)


def field_by_prefix(table: dict[Loc, str]) -> Callable[[Loc], str | None]:
    """``field_of`` for ``add_validation``: the field of the longest prefix of a location in
    ``table`` (``("waves", "percentages", 2)`` → the field of ``("waves", "percentages")``)."""

    def field_of(loc: Sequence[str | int]) -> str | None:
        for end in range(len(loc), 0, -1):
            if (field := table.get(tuple(loc[:end]))) is not None:
                return field
        return None

    return field_of


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
