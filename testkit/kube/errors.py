"""Errors of the Kubernetes API double.

::

    Exception
    ├── StatusError            an API failure, answered as a `Status` body with its HTTP code
    └── LookupError
        └── UnknownResourceError   a resource name the catalogue does not hold (Python side)

`StatusError` is what the store raises for a conflict, a missing object, a bad request; the server
turns it into exactly the JSON the kube-apiserver sends, so the official client raises
`kubernetes.client.exceptions.ApiException` with the same `status`, `reason` and body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StatusError(Exception):
    """An API failure: HTTP `code`, machine `reason`, human `message`, `details` as the server."""

    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def to_status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": dict(self.details),
            "code": self.code,
        }
        return body


@dataclass(frozen=True)
class UnknownResourceError(LookupError):
    """`name` is not a resource the double serves (use e.g. `pods`, `deployments.apps`)."""

    name: str

    def __str__(self) -> str:
        return f"unknown resource {self.name!r}"
