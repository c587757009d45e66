"""Commands to agents: their kinds, result statuses, and why one failed (a fact, not prose)."""

from enum import StrEnum


class CommandKind(StrEnum):
    ROTATE_CREDENTIALS = "rotate_credentials"
    SELF_UPDATE = "self_update"
    PING = "ping"


class CommandStatus(StrEnum):
    ACCEPTED = "accepted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"


class ResultAckOutcome(StrEnum):
    """The Console's answer to a delivered command result (``contracts.messages.ResultAck``).

    The first four end the agent's retries; ``unavailable`` asks it to keep the result and
    try again (the database could not commit it)."""

    RECORDED = "recorded"
    """Committed now."""
    DUPLICATE = "duplicate"
    """Committed before (a re-delivery): acknowledged again, applied once."""
    NOT_TRACKED = "not_tracked"
    """A kind the Console keeps no record of (``ping``, ``rotate_credentials``): nothing to
    store, and nothing to retry."""
    REFUSED = "refused"
    """Never stored (``reason`` says why, e.g. ``unknown_command``); retrying cannot help."""
    UNAVAILABLE = "unavailable"
    """Not committed (``reason``: ``database_unavailable``): keep it and retry."""

    @property
    def settled(self) -> bool:
        """Whether the agent may forget the result."""
        return self is not ResultAckOutcome.UNAVAILABLE


class CommandFailureKind(StrEnum):
    """Why a command was rejected or failed, for machines; ``error`` stays the prose for people.

    Produced by the agent: ``agent/commands.py`` (the dispatcher, the ledger and
    ``rotate_credentials``), ``agent/selfupdate/program.py`` (why a self_update cannot work here,
    also sent on every heartbeat as ``self_update_blocker``), ``agent/selfupdate/handler.py``
    (the self_update's own rejections) and ``agent/selfupdate/failures.py`` (the failed step of
    a self_update → its kind). A reader that meets a value it does not know reads ``None``.
    """

    # rejected before anything was tried
    UNSUPPORTED_COMMAND = "unsupported_command"
    """This build has no handler for the command's kind."""
    BAD_ARGUMENTS = "bad_arguments"
    """The command's args are missing or invalid (an artifact, a rotation nonce)."""
    NOT_SELF_UPDATABLE = "not_self_updatable"
    """A Kubernetes agent (container): upgraded by helm upgrade, never in place."""
    NO_SIGNING_KEY = "no_signing_key"
    """No signing public key configured: unsigned builds are never installed."""
    NOT_SINGLE_FILE_BUILD = "not_single_file_build"
    """The agent does not run from a single-file build it could replace."""
    READ_ONLY_PROGRAM = "read_only_program"
    """The program file or its directory is not writable (a blocker on the heartbeat, or the
    backup/install rename refused with EROFS, EACCES or EPERM)."""
    UPDATE_IN_PROGRESS = "update_in_progress"
    """Another self_update is already running."""
    ARTIFACT_SOURCE_REFUSED = "artifact_source_refused"
    """The artifact's URL is neither the Console's own /api/v1/artifacts/ nor on the agent's
    PROXIMA_ARTIFACT_URL_ALLOW: nothing is downloaded."""
    # failed while trying
    DOWNLOAD_FAILED = "download_failed"
    DOWNLOAD_TOO_LARGE = "download_too_large"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    BAD_SIGNATURE = "bad_signature"
    SMOKE_CHECK_FAILED = "smoke_check_failed"
    """The new build did not answer ``version --json`` correctly (or too old a protocol)."""
    INSTALL_FAILED = "install_failed"
    """Backing up the current build or placing the new one failed (not for want of write
    access: that is ``read_only_program``); the old build is in place."""
    ROLLED_BACK = "rolled_back"
    """The new build did not become healthy (trial, crash, probation) and the old one is back."""
    ROLLBACK_FAILED = "rollback_failed"
    """The update failed and the old build could not be put back: the program file needs a
    person."""
    INTERRUPTED = "interrupted"
    """The agent stopped or restarted while the command ran."""
    ROTATION_FAILED = "rotation_failed"
    """The Console refused the new credentials; the current ones stay."""
    ROTATION_UNCONFIRMED = "rotation_unconfirmed"
    """The Console's answer to a rotation was lost: the new key stays pending, and is used if
    NATS refuses the current one."""
    INTERNAL_ERROR = "internal_error"
    """The handler raised: a bug in the agent."""
