"""The one version rule, as text: what every process accepts as an agent version.

``rollout_policy.versions`` parses with it and ``contracts.bounds.VersionText`` validates wire
fields with it, so an artifact label, a heartbeat and a rollout's target follow the same rule.
The length bound comes first: a version of 4,301 digits must never reach ``int()``.
"""

MAX_VERSION_LENGTH = 64
"""No version is longer than this (the Console's column is 64 characters)."""

VERSION_PATTERN = (
    r"^v?(?P<major>[0-9]+)(?:\.(?P<minor>[0-9]+))?(?:\.(?P<patch>[0-9]+))?"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)
"""MAJOR[.MINOR[.PATCH]][-PRERELEASE][+BUILD], with an optional leading ``v``."""

__all__ = ["MAX_VERSION_LENGTH", "VERSION_PATTERN"]
