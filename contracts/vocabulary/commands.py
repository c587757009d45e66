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


class CommandFailureKind(StrEnum):
    """Why a command was rejected or failed, for machines; ``error`` stays the prose for people.

    Derived from what the agent reports today (``agent/program.py``'s self-update blockers,
    ``agent/selfupdate.py``, ``agent/handover.py``, ``agent/commands.py``).
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
    """The program file or its directory is not writable."""
    UPDATE_IN_PROGRESS = "update_in_progress"
    """Another self_update is already running."""
    # failed while trying
    DOWNLOAD_FAILED = "download_failed"
    DOWNLOAD_TOO_LARGE = "download_too_large"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    BAD_SIGNATURE = "bad_signature"
    SMOKE_CHECK_FAILED = "smoke_check_failed"
    """The new build did not answer ``version --json`` correctly (or too old a protocol)."""
    INSTALL_FAILED = "install_failed"
    """Backing up the current build or placing the new one failed."""
    ROLLED_BACK = "rolled_back"
    """The new build did not become healthy (trial, crash, probation) and the old one is back."""
    INTERRUPTED = "interrupted"
    """The agent stopped or restarted while the command ran."""
    ROTATION_FAILED = "rotation_failed"
    """New credentials could not be made or their outcome is unknown."""
    INTERNAL_ERROR = "internal_error"
