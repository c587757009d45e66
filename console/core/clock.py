"""Time is aware UTC everywhere; SQLModel's UTCDateTime keeps it so in every database."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
