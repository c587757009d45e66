"""The "Start a rollout" form: its first values, the values a submission carries, the API body
they make (``RolloutCreate`` validates it next, as for an API client), and the field each
refusal is drawn beside."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from console.web.forms import FieldErrors, Form, Loc, field_by_prefix
from contracts.bounds import parse_labels
from contracts.rollouts import ArtifactRef, RolloutCreate
from contracts.vocabulary import FailureType, ThresholdAction
from rollout_policy import (
    DEFAULT_CANARY_SIZE,
    DEFAULT_CRITERION,
    DEFAULT_MIN_EXECUTED,
    DEFAULT_WAVE_PERCENTAGES,
    DEFAULT_WAVE_TIMEOUT_SECONDS,
)

__all__ = ["FIELD_IDS", "defaults", "parse", "values"]

_SPLIT = re.compile(r"[\s,]+")
CRITERION_ROWS = 2
_CRITERION_KEYS = ("failure_type", "threshold_percent", "threshold_count", "min_executed", "action")
_REFERENCE = ("version", "url", "sha256", "signature")

# Where each part of RolloutCreate is typed on the form.
_FIELD_OF_LOC: dict[Loc, str] = {
    ("name",): "name",
    ("artifact",): "url",
    **{("artifact", key): key for key in _REFERENCE},
    ("selector", "agent_types"): "agent_types",
    ("selector", "labels"): "labels",
    ("selector", "version_range"): "version_range",
    ("selector", "agent_ids"): "agent_ids",
    ("waves",): "percentages",
    ("waves", "canary_size"): "canary_size",
    ("waves", "percentages"): "percentages",
    ("waves", "max_wave_size"): "max_wave_size",
    ("wave_timeout_seconds",): "wave_timeout_seconds",
}
_TOP_LEVEL = field_by_prefix(_FIELD_OF_LOC)

# The element each field's message is tied to (aria-describedby) and the summary links to.
FIELD_IDS: dict[str, str] = {
    "name": "r-name",
    "hosted": "r-hosted",
    "version": "r-version",
    "url": "r-url",
    "sha256": "r-sha",
    "signature": "r-sig",
    "agent_types": "type-host",
    "labels": "r-labels",
    "version_range": "r-range",
    "agent_ids": "r-ids",
    "canary_size": "r-canary",
    "percentages": "r-pct",
    "max_wave_size": "r-max",
    "wave_timeout_seconds": "r-timeout",
    **{
        f"c{i}_{key}": f"c{i}-{short}"
        for i in range(CRITERION_ROWS)
        for key, short in zip(
            _CRITERION_KEYS, ("type", "pct", "count", "min", "action"), strict=True
        )
    },
}


def _text(number: float | None) -> str:
    return "" if number is None else f"{number:g}"


def defaults(runtime: Any) -> dict[str, Any]:
    """The form as first shown: the one default rollout policy (``rollout_policy.defaults``)."""
    return {
        "name": "",
        "source": "hosted",
        "hosted": "",
        "version": "",
        "url": "",
        "sha256": "",
        "signature": "",
        "agent_types": ["host"],
        "labels": "",
        "version_range": "",
        "agent_ids": "",
        "canary_size": str(DEFAULT_CANARY_SIZE),
        "percentages": ", ".join(f"{p:g}" for p in DEFAULT_WAVE_PERCENTAGES),
        "max_wave_size": "",
        "criteria": [
            {
                "failure_type": DEFAULT_CRITERION.failure_type.value,
                "threshold_percent": _text(DEFAULT_CRITERION.threshold_percent),
                "threshold_count": _text(DEFAULT_CRITERION.threshold_count),
                "min_executed": str(DEFAULT_CRITERION.min_executed),
                "action": DEFAULT_CRITERION.action.value,
            },
            {  # a second row offered for timeouts; empty thresholds leave it out
                "failure_type": FailureType.TIMED_OUT.value,
                "threshold_percent": "",
                "threshold_count": "",
                "min_executed": str(DEFAULT_MIN_EXECUTED),
                "action": ThresholdAction.ABORT.value,
            },
        ],
        "wave_timeout_seconds": f"{DEFAULT_WAVE_TIMEOUT_SECONDS:g}",
        "start_flow": bool(runtime.settings.prefect_api_url),
    }


def values(form: Form) -> dict[str, Any]:
    return {
        "name": form.get("name"),
        "source": "reference" if form.get("source") == "reference" else "hosted",
        "hosted": form.get("hosted"),
        "version": form.get("version"),
        "url": form.get("url"),
        "sha256": form.get("sha256").lower(),
        "signature": form.get("signature"),
        "agent_types": form.getlist("agent_types"),
        "labels": form.get("labels"),
        "version_range": form.get("version_range"),
        "agent_ids": form.get("agent_ids"),
        "canary_size": form.get("canary_size"),
        "percentages": form.get("percentages"),
        "max_wave_size": form.get("max_wave_size"),
        "criteria": [
            {
                "failure_type": form.get(f"c{i}_failure_type", DEFAULT_CRITERION.failure_type),
                "threshold_percent": form.get(f"c{i}_threshold_percent"),
                "threshold_count": form.get(f"c{i}_threshold_count"),
                "min_executed": form.get(f"c{i}_min_executed"),
                "action": form.get(f"c{i}_action", DEFAULT_CRITERION.action),
            }
            for i in range(CRITERION_ROWS)
        ],
        "wave_timeout_seconds": form.get("wave_timeout_seconds"),
        "start_flow": form.flag("start_flow"),
    }


def _body(
    values: dict[str, Any], artifacts: list[ArtifactRef], errors: FieldErrors
) -> tuple[dict[str, Any], list[int]]:
    """The API's request body from the form, and the form row of each criterion it holds (empty
    rows are left out); what cannot even be put into the body is added to ``errors``."""
    if values["source"] == "hosted":
        match = next((a for a in artifacts if a.url == values["hosted"]), None)
        if match is None:
            errors.add("hosted", "Pick a hosted build, or enter a reference below.")
            artifact: dict[str, Any] = {}
        else:
            artifact = match.model_dump()
    else:
        artifact = {k: values[k] for k in _REFERENCE}
    labels: dict[str, str] = {}
    try:
        labels = parse_labels(values["labels"])
    except ValueError as exc:
        errors.add("labels", f"{exc}.")
    percentages: list[str] = [p for p in _SPLIT.split(values["percentages"]) if p]
    criteria, rows = [], []
    for i, c in enumerate(values["criteria"]):
        if not c["threshold_percent"] and not c["threshold_count"]:
            continue  # an empty row
        rows.append(i)
        criteria.append(
            {
                "failure_type": c["failure_type"],
                "threshold_percent": c["threshold_percent"] or None,
                "threshold_count": c["threshold_count"] or None,
                "min_executed": c["min_executed"] or DEFAULT_MIN_EXECUTED,
                "action": c["action"],
            }
        )
    body: dict[str, Any] = {
        "name": values["name"] or "rollout",
        "artifact": artifact,
        "selector": {
            "agent_types": values["agent_types"],
            "labels": labels,
            "version_range": values["version_range"],
            "agent_ids": [a for a in _SPLIT.split(values["agent_ids"]) if a],
        },
        "waves": {
            "canary_size": values["canary_size"] or DEFAULT_CANARY_SIZE,
            "percentages": percentages or None,
            "max_wave_size": values["max_wave_size"] or None,
        },
        "criteria": criteria,
        "wave_timeout_seconds": values["wave_timeout_seconds"] or DEFAULT_WAVE_TIMEOUT_SECONDS,
        "start_flow": values["start_flow"],
    }
    return body, rows


def _field_of(values: dict[str, Any], rows: list[int]) -> Any:
    """Where an error of ``RolloutCreate`` at a location is drawn on this submission."""

    def field_of(loc: Loc) -> str | None:
        if loc[:1] == ("criteria",) and len(loc) > 1 and isinstance(loc[1], int):
            row = rows[loc[1]] if loc[1] < len(rows) else 0
            key = loc[2] if len(loc) > 2 and loc[2] in _CRITERION_KEYS else "threshold_percent"
            return f"c{row}_{key}"
        field = _TOP_LEVEL(loc)
        if values["source"] == "hosted" and loc[:1] == ("artifact",):
            return "hosted"  # the build's reference is not on the form: its picker is
        return field

    return field_of


def parse(
    values: dict[str, Any], artifacts: list[ArtifactRef]
) -> tuple[RolloutCreate | None, FieldErrors]:
    """The submission as the API's model, or every reason it is not one, by field."""
    errors = FieldErrors()
    body, rows = _body(values, artifacts, errors)
    try:
        create = RolloutCreate.model_validate(body)
    except ValidationError as exc:
        unpicked = "hosted" in errors
        errors.add_validation(exc, _field_of(values, rows))
        if unpicked:  # "pick a build" says it all: not also each missing part of one
            errors["hosted"] = errors["hosted"][:1]
        return None, errors
    return (create, errors) if not errors else (None, errors)
