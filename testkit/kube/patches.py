"""The three patch types the official client sends, applied to plain JSON objects.

- JSON patch (RFC 6902, `application/json-patch+json`; the client sends it for a list body);
- JSON merge patch (RFC 7386, `application/merge-patch+json`);
- strategic merge patch (`application/strategic-merge-patch+json`; the client's default for a
  dict body): a merge patch in which lists of objects named by a merge key (containers and
  volumes by `name`, volumeMounts by `mountPath`, ports by `containerPort`/`port`, conditions by
  `type`, …) merge item by item instead of being replaced, `$patch: delete|replace` directives
  are honoured, and `finalizers` merge as a set. The merge keys come from a table of the fields
  the project touches, not from the OpenAPI schema; other lists are replaced, as with a merge
  patch.

Server-side apply (`application/apply-patch+yaml`) is applied as a strategic merge patch.
All functions return a new object and never change their arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from testkit.kube.errors import StatusError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# field name → merge key, for lists that a strategic merge patch merges item by item
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "hostAliases": "ip",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
    "taints": "key",
}
_SET_LISTS = frozenset({"finalizers"})


def _bad(message: str) -> StatusError:
    return StatusError(422, "Invalid", message)


# --- RFC 6902 -----------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _bad(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, list):
            doc = doc[int(part)]
        elif isinstance(doc, dict):
            doc = doc[part]
        else:
            raise KeyError(part)
    return doc


def _json_patch_op(doc: Any, op: Mapping[str, Any]) -> Any:
    kind = op.get("op")
    parts = _pointer(str(op.get("path", "")))
    if kind == "test":
        if _walk(doc, parts) != op.get("value"):
            raise _bad(f"the test at {op.get('path')!r} failed")
        return doc
    if kind in ("move", "copy"):
        value = copy.deepcopy(_walk(doc, _pointer(str(op.get("from", "")))))
        if kind == "move":
            doc = _json_patch_op(doc, {"op": "remove", "path": op["from"]})
        return _json_patch_op(doc, {"op": "add", "path": op["path"], "value": value})
    if not parts:
        if kind in ("add", "replace"):
            return copy.deepcopy(op.get("value"))
        raise _bad("cannot remove the whole document")
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            del parent[index]
        elif kind == "replace":
            parent[index] = copy.deepcopy(op.get("value"))
        else:
            raise _bad(f"unknown JSON patch op {kind!r}")
    elif isinstance(parent, dict):
        if kind == "add":
            parent[last] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            del parent[last]
        elif kind == "replace":
            if last not in parent:
                raise KeyError(last)
            parent[last] = copy.deepcopy(op.get("value"))
        else:
            raise _bad(f"unknown JSON patch op {kind!r}")
    else:
        raise KeyError(last)
    return doc


def apply_json_patch(obj: Mapping[str, Any], operations: Any) -> dict[str, Any]:
    if not isinstance(operations, list):
        raise StatusError(400, "BadRequest", "a JSON patch must be a list of operations")
    doc: Any = copy.deepcopy(dict(obj))
    for op in operations:
        try:
            doc = _json_patch_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise _bad(f"the JSON patch operation {op!r} does not apply: {exc!r}") from None
    if not isinstance(doc, dict):
        raise _bad("a JSON patch must leave an object")
    return doc


# --- RFC 7386 -----------------------------------------------------------------------------------


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def apply_merge_patch(obj: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, Mapping):
        raise StatusError(400, "BadRequest", "a merge patch must be a JSON object")
    merged: dict[str, Any] = _merge(copy.deepcopy(dict(obj)), patch)
    return merged


# --- strategic merge ----------------------------------------------------------------------------


def _merge_key(field: str, items: list[Any]) -> str | None:
    if field == "ports":
        if any(isinstance(i, Mapping) and "containerPort" in i for i in items):
            return "containerPort"
        return "port"
    return _MERGE_KEYS.get(field)


def _strategic_list(field: str, target: Any, patch: list[Any]) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if field in _SET_LISTS:
        return current + [copy.deepcopy(v) for v in patch if v not in current]
    key = _merge_key(field, current + patch)
    if key is None or not all(isinstance(i, Mapping) for i in patch):
        return copy.deepcopy(patch)
    if any(isinstance(i, Mapping) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, Mapping) and "$patch" in i)]
    result = [copy.deepcopy(i) for i in current]
    for item in patch:
        position = next(
            (
                n
                for n, have in enumerate(result)
                if isinstance(have, Mapping) and have.get(key) == item.get(key)
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
        elif position is None:
            result.append(_strategic(None, item))
        else:
            result[position] = _strategic(result[position], item)
    return result


def _strategic(target: Any, patch: Any) -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # $retainKeys, $setElementOrder/…: order and pruning hints
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _strategic_list(key, result.get(key), value)
        else:
            merged = _strategic(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def apply_strategic_merge_patch(obj: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    if not isinstance(patch, Mapping):
        raise StatusError(400, "BadRequest", "a strategic merge patch must be a JSON object")
    merged: dict[str, Any] = _strategic(copy.deepcopy(dict(obj)), patch)
    return merged


def apply_patch(obj: Mapping[str, Any], patch: Any, content_type: str) -> dict[str, Any]:
    """Apply `patch` as the given Content-Type says; 415 for a type the server does not take."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == JSON_PATCH:
        return apply_json_patch(obj, patch)
    if media == MERGE_PATCH:
        return apply_merge_patch(obj, patch)
    if media in (STRATEGIC_MERGE_PATCH, APPLY_PATCH):
        return apply_strategic_merge_patch(obj, patch)
    raise StatusError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}, {APPLY_PATCH}",
    )
