"""Pure decisions: no I/O, stdlib only (plus the stdlib-only ``contracts.vocabulary``).

The Console and the flows feed it snapshots and get back plans, decisions and new states:

- :mod:`~rollout_policy.eligibility`: who a rollout is for and who is excluded, with reasons;
- :mod:`~rollout_policy.waves`: canary and growth waves, deterministic per seed;
- :mod:`~rollout_policy.deliveries`: late and repeated command results, when silence is a timeout;
- :mod:`~rollout_policy.thresholds`: IoT-Jobs-style failure criteria and the decision they make;
- :mod:`~rollout_policy.states`: the rollout state machine;
- :mod:`~rollout_policy.defaults`: the one default rollout policy;
- :mod:`~rollout_policy.drivers`: when a rollout has lost the Prefect run that drives it;
- :mod:`~rollout_policy.identities`: enroll / re-bind / release, online, the quiet window;
- :mod:`~rollout_policy.hostdatadir`: the ``hostDataDir`` migration plan per node;
- :mod:`~rollout_policy.versions`: semver-ish versions and ranges.

The modules are private to the package: callers import from its ``__all__`` only
(``from rollout_policy import plan_waves``), never from a module of it.

Semantics and worked examples: ``docs/rollout-policy.md``.
"""

from contracts.vocabulary.rollouts import FailureType, ThresholdAction
from rollout_policy.defaults import (
    DEFAULT_CANARY_SIZE,
    DEFAULT_CRITERION,
    DEFAULT_MIN_EXECUTED,
    DEFAULT_ROLLOUT_POLICY,
    DEFAULT_THRESHOLD_POLICY,
    DEFAULT_WAVE_PERCENTAGES,
    DEFAULT_WAVE_POLICY,
    DEFAULT_WAVE_TIMEOUT_SECONDS,
    RolloutPolicy,
)
from rollout_policy.deliveries import (
    DEFAULT_RESULT_GRACE_SECONDS,
    ResultFate,
    is_overdue,
    result_fate,
)
from rollout_policy.drivers import LIVE_RUN_STATES, PAUSED_RUN_STATE, driver_lost, resume_owed
from rollout_policy.eligibility import (
    CLUSTER_LABEL,
    CONTAINER_AGENT_TYPES,
    AgentSnapshot,
    EligibilityReport,
    Exclusion,
    ExclusionReason,
    Selector,
    evaluate_eligibility,
)
from rollout_policy.errors import (
    DuplicateAgentError,
    IllegalTransitionError,
    InvalidPolicyError,
    MigrationInputError,
    RolloutPolicyError,
    ThresholdPolicyError,
    VersionError,
    VersionRangeError,
    WavePolicyError,
)
from rollout_policy.events import Decision
from rollout_policy.hostdatadir import (
    NODE_MONITOR_TYPE,
    AgentRecord,
    MigrationNode,
    MigrationPlan,
    MigrationRow,
    NodeClass,
    ReleaseReason,
    plan_hostdatadir_migration,
)
from rollout_policy.identities import (
    DEFAULT_QUIET_WINDOW_SECONDS,
    DEFAULT_STALE_AFTER_SECONDS,
    REBIND_REFUSALS,
    EnrollmentAction,
    EnrollmentClaim,
    EnrollmentDecision,
    HeldRecord,
    RebindHow,
    ReleaseDecision,
    agent_status,
    decide_enrollment,
    decide_release,
    evidence_matches,
    is_online,
    is_quiet,
    missing_evidence_kinds,
    online_cutoff,
    rebind_refusals,
    token_may_enroll,
)
from rollout_policy.ids import AgentId, EnvironmentId, NodeName
from rollout_policy.states import (
    EVENT_TARGETS,
    HALTED_STATES,
    LEGAL_EVENTS,
    TERMINAL_STATES,
    EventKind,
    RolloutEvent,
    RolloutState,
    RolloutStatus,
    Transition,
    next_state,
)
from rollout_policy.thresholds import (
    FailureCriterion,
    Measure,
    Outcome,
    ResultCounts,
    ThresholdDecision,
    ThresholdPolicy,
    Trip,
    evaluate_thresholds,
)
from rollout_policy.versions import (
    ANY_VERSION,
    Comparison,
    Version,
    VersionClause,
    VersionRange,
    parse_version,
    parse_version_range,
    try_parse_version,
)
from rollout_policy.waves import (
    FactorGrowth,
    PercentGrowth,
    Wave,
    WaveKind,
    WavePlan,
    WavePolicy,
    plan_waves,
    wave_sizes,
)

__all__ = [
    "ANY_VERSION",
    "CLUSTER_LABEL",
    "CONTAINER_AGENT_TYPES",
    "DEFAULT_CANARY_SIZE",
    "DEFAULT_CRITERION",
    "DEFAULT_MIN_EXECUTED",
    "DEFAULT_QUIET_WINDOW_SECONDS",
    "DEFAULT_RESULT_GRACE_SECONDS",
    "DEFAULT_ROLLOUT_POLICY",
    "DEFAULT_STALE_AFTER_SECONDS",
    "DEFAULT_THRESHOLD_POLICY",
    "DEFAULT_WAVE_PERCENTAGES",
    "DEFAULT_WAVE_POLICY",
    "DEFAULT_WAVE_TIMEOUT_SECONDS",
    "EVENT_TARGETS",
    "HALTED_STATES",
    "LEGAL_EVENTS",
    "LIVE_RUN_STATES",
    "NODE_MONITOR_TYPE",
    "PAUSED_RUN_STATE",
    "REBIND_REFUSALS",
    "TERMINAL_STATES",
    "AgentId",
    "AgentRecord",
    "AgentSnapshot",
    "Comparison",
    "Decision",
    "DuplicateAgentError",
    "EligibilityReport",
    "EnrollmentAction",
    "EnrollmentClaim",
    "EnrollmentDecision",
    "EnvironmentId",
    "EventKind",
    "Exclusion",
    "ExclusionReason",
    "FactorGrowth",
    "FailureCriterion",
    "FailureType",
    "HeldRecord",
    "IllegalTransitionError",
    "InvalidPolicyError",
    "Measure",
    "MigrationInputError",
    "MigrationNode",
    "MigrationPlan",
    "MigrationRow",
    "NodeClass",
    "NodeName",
    "Outcome",
    "PercentGrowth",
    "RebindHow",
    "ReleaseDecision",
    "ReleaseReason",
    "ResultCounts",
    "ResultFate",
    "RolloutEvent",
    "RolloutPolicy",
    "RolloutPolicyError",
    "RolloutState",
    "RolloutStatus",
    "Selector",
    "ThresholdAction",
    "ThresholdDecision",
    "ThresholdPolicy",
    "ThresholdPolicyError",
    "Transition",
    "Trip",
    "Version",
    "VersionClause",
    "VersionError",
    "VersionRange",
    "VersionRangeError",
    "Wave",
    "WaveKind",
    "WavePlan",
    "WavePolicy",
    "WavePolicyError",
    "agent_status",
    "decide_enrollment",
    "decide_release",
    "driver_lost",
    "evaluate_eligibility",
    "evaluate_thresholds",
    "evidence_matches",
    "is_online",
    "is_overdue",
    "is_quiet",
    "missing_evidence_kinds",
    "next_state",
    "online_cutoff",
    "parse_version",
    "parse_version_range",
    "plan_hostdatadir_migration",
    "plan_waves",
    "rebind_refusals",
    "result_fate",
    "resume_owed",
    "token_may_enroll",
    "try_parse_version",
    "wave_sizes",
]
