"""Identity outcomes that cross processes (the release-identity and enrollment dry runs)."""

from enum import StrEnum


class ReleaseOutcome(StrEnum):
    """What release-identity does (or, in a dry run, would do) with one record."""

    WOULD_RELEASE = "would_release"
    RELEASED = "released"
    ALREADY_RELEASED = "already_released"
    REFUSED = "refused"


class EnrollmentAction(StrEnum):
    """What an enrollment does under its name (``rollout_policy.identities.decide_enrollment``)."""

    CREATE = "create"
    SAME_IDENTITY = "same_identity"
    REBIND = "rebind"
    REFUSE = "refuse"


class RebindHow(StrEnum):
    """How a re-bind was earned (the Console records it on the ``rebound`` event)."""

    RELEASED = "released"
    QUIET_WITH_EVIDENCE = "quiet_with_evidence"
