"""Agent identities in the Console: enrollment, re-bind, release, revoke, credential rotation.

Decisions come from ``rollout_policy.identities`` (``decide_enrollment``, ``decide_release``);
these modules only read what they need, store the outcome and have NATS enforce it:

- ``enrollment``: enroll or re-bind under (environment, agent type, name);
- ``enrollment_preview``: the enrollment's dry run (``?dry_run=true``): the same decision, no
  change;
- ``enrollment_facts``: what an enrollment reads before it decides, in one round trip, and its
  token's use;
- ``enrollment_refusals``: a 409's words and the clash kept on the record holding the name;
- ``rebinding``: what a re-bind takes away from the machine that held the record before;
- ``lifecycle``: release (with a dry run), revoke and credential rotation; fresh NATS
  credentials for a current key.

Adapters (``console.api``, ``console.web``) and the test kit use the names below; the modules
are this package's own.
"""

from console.services.identities.enrollment import enroll_agent
from console.services.identities.enrollment_preview import preview_enrollment
from console.services.identities.lifecycle import (
    accept_rotation,
    nats_credentials,
    release,
    revoke_agent,
    rotate_credentials,
)

__all__ = [
    "accept_rotation",
    "enroll_agent",
    "nats_credentials",
    "preview_enrollment",
    "release",
    "revoke_agent",
    "rotate_credentials",
]
