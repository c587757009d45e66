"""Who is calling (bearer tokens → user names) and what they may do (RBAC rules).

RBAC is off unless a test turns it on with the rules of a ClusterRole; then every resource
request outside them answers 403 with the API server's exact message. Discovery and health
endpoints stay open, as `system:discovery` and `system:public-info-viewer` make them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from testkit.kube.errors import StatusError
from testkit.kube.routing import Target

DEFAULT_USER = "system:serviceaccount:proxima-system:proxima-agent-cluster-agent"
DEFAULT_TOKEN = "proxima-kube-double-token"


def forbidden(target: Target, user: str) -> StatusError:
    """403 exactly as the API server words it."""
    subject = f'{target.qualified} "{target.name}"' if target.name else target.qualified
    if target.namespace:
        scope = f'in the namespace "{target.namespace}"'
    else:
        scope = "at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{user}" cannot {target.verb} resource '
        f'"{target.resource}" in API group "{target.group}" {scope}'
    )
    details: dict[str, Any] = {"kind": target.plural}
    if target.group:
        details["group"] = target.group
    if target.name:
        details["name"] = target.name
    return StatusError(403, "Forbidden", message, details)


def unauthorized() -> StatusError:
    return StatusError(401, "Unauthorized", "Unauthorized")


def _matches(allowed: Iterable[str], value: str) -> bool:
    allowed = list(allowed)
    return "*" in allowed or value in allowed


@dataclass(frozen=True)
class PolicyRule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, rule: Mapping[str, Any]) -> PolicyRule:
        return cls(
            api_groups=tuple(rule.get("apiGroups") or ()),
            resources=tuple(rule.get("resources") or ()),
            verbs=tuple(rule.get("verbs") or ()),
            resource_names=tuple(rule.get("resourceNames") or ()),
        )

    def allows(self, target: Target) -> bool:
        if not _matches(self.api_groups, target.group) or not _matches(self.verbs, target.verb):
            return False
        resource_ok = _matches(self.resources, target.resource) or (
            target.subresource is not None and f"*/{target.subresource}" in self.resources
        )
        if not resource_ok:
            return False
        return not self.resource_names or target.name in self.resource_names


@dataclass(frozen=True)
class RbacPolicy:
    """The union of some ClusterRole/Role rules, for one user or (user=None) for everyone."""

    rules: tuple[PolicyRule, ...]
    user: str | None = None

    @classmethod
    def from_rules(
        cls, rules: Iterable[Mapping[str, Any]], *, user: str | None = None
    ) -> RbacPolicy:
        return cls(tuple(PolicyRule.from_dict(r) for r in rules if r.get("resources")), user)

    def applies_to(self, user: str) -> bool:
        return self.user is None or self.user == user

    def allows(self, target: Target) -> bool:
        return any(rule.allows(target) for rule in self.rules)

    def grants(self, group: str, resource: str, verb: str, name: str | None = None) -> bool:
        """Does some rule grant `verb` on `resource` ("pods", "pods/status") in `group`? Feed it
        the double's `permissions()` to tie a component's calls to a chart's ClusterRole."""
        plural, _, subresource = resource.partition("/")
        target = Target(verb, group, "", plural, None, None, name, subresource or None)
        return self.allows(target)
