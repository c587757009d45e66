"""Every ``reason`` the system answers with: the stable, machine-readable half of an error body
(``contracts.enrollment.ErrorBody``) or a refusal. Values are wire values: never change one."""

# ruff: noqa: S105 (reason codes about tokens, not secrets)
from enum import StrEnum


class ErrorReason(StrEnum):
    # --- requests ------------------------------------------------------------------ 400/413/422
    INVALID_REQUEST = "invalid_request"
    MALFORMED_JSON = "malformed_json"
    """Not JSON, or JSON outside RFC 8259's interoperable subset: NaN, ±Infinity, a lone UTF-16
    surrogate, a NUL character in a string."""
    REQUEST_TOO_LARGE = "request_too_large"
    NOT_FOUND = "not_found"
    """No such route (a missing resource has its own reason, e.g. ``agent_not_found``)."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    INTERNAL_ERROR = "internal_error"
    """A 500: a bug in the Console, logged with its traceback; never expected."""
    # --- outages ---------------------------------------------------------------------- 503
    DATABASE_UNAVAILABLE = "database_unavailable"
    """503: the Console cannot reach its database right now; retry later (also the answer to
    a command result the Console could not commit: the agent keeps it and retries)."""
    NATS_UNAVAILABLE = "nats_unavailable"
    """503 on ``/readyz``: the Console's own NATS connection is down."""
    # --- command results (refused acknowledgements, never HTTP) -------------------------------
    UNKNOWN_COMMAND = "unknown_command"
    """A result for a command this Console never sent to the agent that reports it (an id it
    does not know, or another agent's): refused, never stored; retrying cannot help."""
    # --- API tokens and scopes --------------------------------------------------------- 401/403
    MISSING_TOKEN = "missing_token"
    MALFORMED_AUTHORIZATION = "malformed_authorization"
    INVALID_TOKEN = "invalid_token"
    TOKEN_REVOKED = "token_revoked"
    TOKEN_EXPIRED = "token_expired"
    MISSING_SCOPE = "missing_scope"
    WRONG_ENVIRONMENT = "wrong_environment"
    SCOPE_ESCALATION = "scope_escalation"
    """Also refuses revoking a token that holds scopes the caller does not."""
    # --- rate limits (sign-in, enrollment) ------------------------------------------------ 429
    RATE_LIMITED = "rate_limited"
    # --- install tokens ------------------------------------------------------------------ 401
    INVALID_INSTALL_TOKEN = "invalid_install_token"
    INSTALL_TOKEN_REVOKED = "install_token_revoked"
    INSTALL_TOKEN_EXPIRED = "install_token_expired"
    INSTALL_TOKEN_EXHAUSTED = "install_token_exhausted"
    INSTALL_TOKEN_SCOPE = "install_token_scope"
    """403: the token may not enroll this agent type (a cluster-bound token and a host)."""
    # --- signatures and keys ---------------------------------------------------------- 400/401
    STALE_SIGNATURE = "stale_signature"
    BAD_SIGNATURE = "bad_signature"
    NOT_CURRENT_KEY = "not_current_key"
    IDENTITY_REBOUND = "identity_rebound"
    """401: the key was retired because its record was re-bound to another machine."""
    PUBLIC_KEY_IN_USE = "public_key_in_use"
    """409: another record holds this public key (keys are unique across all records)."""
    PUBLIC_KEY_RETIRED = "public_key_retired"
    """409: this key was taken away (revoked, released, rotated, re-bound): never again."""
    # --- enrollment conflicts (409; was ``ConflictReason``) ----------------------------------
    NAME_IN_USE = "name_in_use"
    NO_IDENTITY_EVIDENCE = "no_identity_evidence"
    IDENTITY_MISMATCH = "identity_mismatch"
    AGENT_REVOKED = "agent_revoked"
    """Also refuses a release (was ``ReleaseRefusal``) and a rotation."""
    # --- release refusals (409; was ``ReleaseRefusal``) ----------------------------------------
    AGENT_RECENTLY_SEEN = "agent_recently_seen"
    # --- credential rotation --------------------------------------------------- 401/409/504
    AGENT_RELEASED = "agent_released"
    AGENT_OFFLINE = "agent_offline"
    AGENT_NOT_ROTATABLE = "agent_not_rotatable"
    UNKNOWN_ROTATION = "unknown_rotation"
    ROTATION_EXPIRED = "rotation_expired"
    ROTATION_TIMED_OUT = "rotation_timed_out"
    # --- clusters ---------------------------------------------------------------------- 400/409
    NO_SLUG = "no_slug"
    BAD_SLUG = "bad_slug"
    CLUSTER_EXISTS = "cluster_exists"
    # --- rollouts and artifacts ------------------------------------------------------- 400/409
    INVALID_ROLLOUT = "invalid_rollout"
    ILLEGAL_TRANSITION = "illegal_transition"
    NO_SUCH_WAVE = "no_such_wave"
    EMPTY_ARTIFACT = "empty_artifact"
    INVALID_VERSION = "invalid_version"
    """Not a version by the fleet's one rule (1-64 characters, ``rollout_policy.versions``)."""
    SIGNING_KEYS_NOT_CONFIGURED = "signing_keys_not_configured"
    """The Console trusts no build-signing key (PROXIMA_SIGNING_PUBLIC_KEYS): it hosts nothing."""
    NOT_AN_AGENT_BUILD = "not_an_agent_build"
    """The upload is not a zipapp with the version stamped by ``scripts/build_agent.py``."""
    BUILD_VERSION_MISMATCH = "build_version_mismatch"
    """The version stamped in the build is not the version it was uploaded as."""
    ARTIFACT_URL_NOT_ALLOWED = "artifact_url_not_allowed"
    """A rollout's artifact URL is neither the Console's own nor on PROXIMA_ARTIFACT_URL_ALLOW."""
    DRIVER_LOST = "driver_lost"
    """The rollout's flow run is gone (crashed, failed, cancelled, vanished): restart the driver."""
    DRIVER_RUNNING = "driver_running"
    """restart-driver refused: the rollout's flow run is still alive in Prefect."""
    FOREIGN_FLOW_RUN = "foreign_flow_run"
    """A start named a flow run that is not a run of the rollout flow started for this rollout
    (unknown to Prefect, another flow's, another rollout's)."""
    RESUME_REFUSED = "resume_refused"
    """Prefect refused to resume the rollout's paused flow run."""
    PREFECT_NOT_CONFIGURED = "prefect_not_configured"
    """The Console has no PROXIMA_PREFECT_API_URL: it cannot start or check flow runs."""
    PREFECT_UNAVAILABLE = "prefect_unavailable"
    """Prefect's API did not answer: nothing was changed, try again."""
    # --- not found ------------------------------------------------------------------------- 404
    AGENT_NOT_FOUND = "agent_not_found"
    API_TOKEN_NOT_FOUND = "api_token_not_found"
    INSTALL_TOKEN_NOT_FOUND = "install_token_not_found"
    CLUSTER_NOT_FOUND = "cluster_not_found"
    ROLLOUT_NOT_FOUND = "rollout_not_found"
    ARTIFACT_NOT_FOUND = "artifact_not_found"
    ARTIFACT_MISSING = "artifact_missing"
    """The artifact's record exists but its file is gone."""
    AUDIT_NOT_FOUND = "audit_not_found"
    NO_AUDIT = "no_audit"
    NO_SUCH_ACTION = "no_such_action"
    NO_SUCH_DECISION = "no_such_decision"
    # --- the web pages (error pages, sign-in redirects) --------------------------- 400/401/403/415
    SIGNED_OUT = "signed_out"
    SESSION_ENDED = "session_ended"
    """The browser's session cookie names no live session: idle too long, past its lifetime,
    ended by newer sign-ins of the same token, or signed out in another tab."""
    CSRF_FAILED = "csrf_failed"
    UNSUPPORTED_FORM = "unsupported_form"
    MALFORMED_FORM = "malformed_form"


ENROLLMENT_CONFLICTS: frozenset[ErrorReason] = frozenset(
    {
        ErrorReason.NAME_IN_USE,
        ErrorReason.NO_IDENTITY_EVIDENCE,
        ErrorReason.IDENTITY_MISMATCH,
        ErrorReason.AGENT_REVOKED,
    }
)
"""The reasons an enrollment answers 409 with."""

RELEASE_REFUSALS: frozenset[ErrorReason] = frozenset(
    {ErrorReason.AGENT_REVOKED, ErrorReason.AGENT_RECENTLY_SEEN}
)
"""The reasons release-identity answers 409 with."""
