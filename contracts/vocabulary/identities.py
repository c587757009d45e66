"""Identity outcomes that cross processes (the release-identity dry run, its report)."""

from enum import StrEnum


class ReleaseOutcome(StrEnum):
    """What release-identity does (or, in a dry run, would do) with one record."""

    WOULD_RELEASE = "would_release"
    RELEASED = "released"
    ALREADY_RELEASED = "already_released"
    REFUSED = "refused"
