"""The one check of an agent's signed request (enrollment, NATS credentials): fresh, and signed
by the key it names."""

from __future__ import annotations

from datetime import UTC, datetime

from console.core.signatures import SignatureError, verify
from console.errors import UnauthorizedError
from contracts.vocabulary import ErrorReason

__all__ = ["check_signed"]


def check_signed(
    public_key: str,
    message: bytes,
    signature: str,
    *,
    signed_at: datetime,
    now: datetime,
    skew_seconds: float,
) -> None:
    """The one check of an agent's signed request (enrollment, NATS credentials): signed
    within ``skew_seconds`` of the Console's clock, by ``public_key``. Either failure is an
    authentication failure: 401 ``stale_signature`` or ``bad_signature``."""
    signed_at = signed_at if signed_at.tzinfo else signed_at.replace(tzinfo=UTC)
    if abs((now - signed_at).total_seconds()) > skew_seconds:
        raise UnauthorizedError(
            ErrorReason.STALE_SIGNATURE,
            f"the request was signed at {signed_at.isoformat()}, more than {skew_seconds:g} s "
            "from the Console's clock: check the agent's clock",
        )
    try:
        verify(public_key, message, signature)
    except SignatureError as exc:
        raise UnauthorizedError(
            ErrorReason.BAD_SIGNATURE,
            f"the signature does not prove possession of the key: {exc.why}",
        ) from exc
