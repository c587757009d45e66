"""Label and field selectors, parsed and matched as the API server does.

Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`,
joined by commas (all must hold). Field selectors: `f=v`, `f==v`, `f!=v` on the fields the API
server indexes for that resource (`metadata.name`, `metadata.namespace` everywhere, e.g.
`spec.nodeName` and `status.phase` on pods); any other field answers 400 like the real server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from testkit.kube.errors import StatusError
from testkit.kube.resources import ResourceType

Predicate = Callable[[Mapping[str, Any]], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=|>|<)\s*(?P<value>{_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", ">", "<"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        try:  # ">" and "<" compare integers; a non-integer label never matches
            number, bound = int(str(value)), int(self.values[0])
        except ValueError:
            return False
        return present and (number > bound if self.op == ">" else number < bound)


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside `( … )`."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def _bad_selector(text: str, why: str) -> StatusError:
    return StatusError(400, "BadRequest", f"unable to parse requirement: {why}: {text!r}")


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    if not text or not text.strip():
        return ()
    requirements: list[Requirement] = []
    for part in _split_top_level(text):
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            if not values or not all(_VALUE_RE.match(v) for v in values):
                raise _bad_selector(part, "for 'in', 'notin' operators, values set can't be empty")
            requirements.append(Requirement(m["key"], m["op"], values))
        elif m := _CMP_RE.match(part):
            op = "=" if m["op"] == "==" else m["op"]
            if op in (">", "<") and not re.fullmatch(r"-?\d+", m["value"]):
                raise _bad_selector(part, "for 'Gt', 'Lt' operators, the value must be an integer")
            requirements.append(Requirement(m["key"], op, (m["value"],)))
        elif m := _EXISTS_RE.match(part):
            requirements.append(Requirement(m["key"], "!" if m["neg"] else "exists"))
        else:
            raise _bad_selector(part, "found unexpected token")
    return tuple(requirements)


def label_predicate(text: str | None) -> Predicate | None:
    requirements = parse_label_selector(text)
    if not requirements:
        return None

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r.matches(labels) for r in requirements)

    return matches


# The fields the API server lets a field selector use, besides metadata.name/namespace.
_INDEXED_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    ("", "nodes"): frozenset({"spec.unschedulable"}),
    ("", "namespaces"): frozenset({"status.phase"}),
    ("", "secrets"): frozenset({"type"}),
    ("", "events"): frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "reason",
            "type",
        }
    ),
    ("batch", "jobs"): frozenset({"status.successful"}),
    ("apps", "replicasets"): frozenset({"status.replicas"}),
}

_FIELD_RE = re.compile(r"^\s*(?P<field>[A-Za-z0-9_.]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^,]*)\s*$")


def _field_value(obj: Mapping[str, Any], dotted: str) -> str:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def field_predicate(text: str | None, rt: ResourceType) -> Predicate | None:
    if not text or not text.strip():
        return None
    allowed = {"metadata.name", "metadata.namespace"} | _INDEXED_FIELDS.get(
        (rt.group, rt.plural), frozenset()
    )
    terms: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = _FIELD_RE.match(part)
        if m is None:
            raise StatusError(400, "BadRequest", f"invalid selector: {text!r}")
        if m["field"] not in allowed:
            raise StatusError(400, "BadRequest", f"field label not supported: {m['field']}")
        terms.append((m["field"], m["op"] != "!=", m["value"].strip()))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, f) == v) is equal for f, equal, v in terms)

    return matches
