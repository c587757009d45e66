"""Sealed deployments: a run asking for a parameter no flow takes is refused by Prefect's API
up front (409, naming the parameter) instead of failing later on a worker.

Prefect validates a run's parameters against the deployment's ``parameter_openapi_schema`` when
``enforce_parameter_schema`` is on (prefect.yaml sets it on every deployment). That checks types
and required names, but the schema ``prefect deploy`` generates from a flow's signature
(``prefect.utilities.callables.ParameterSchema``) has no ``additionalProperties`` and cannot be
given one (prefect.yaml's own value is overwritten, and the model drops unknown keys), so
``{"dry_rn": false}`` passed and the run crashed once a worker called the flow. ``seal`` sets
``additionalProperties: false`` on every deployment prefect.yaml declares, once they are
deployed: ``proxima-fleet deploy`` runs ``prefect deploy --all`` and then seals. A later plain
``prefect deploy`` replaces the schema with an open one again; ``proxima-fleet deploy
--seal-only`` seals it again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import DeploymentUpdate
from prefect.flows import load_flow_from_entrypoint

__all__ = ["SealResult", "declared_deployments", "seal", "seal_declared"]


@dataclass(frozen=True)
class SealResult:
    name: str  # flow-name/deployment-name
    changed: bool
    parameters: tuple[str, ...]


def declared_deployments(prefect_yaml: Path) -> list[str]:
    """``flow-name/deployment-name`` of every deployment in prefect.yaml (the flow's name is read
    from its entrypoint, relative to the file's directory, as ``prefect deploy`` does)."""
    spec = yaml.safe_load(prefect_yaml.read_text())
    names = []
    for deployment in spec.get("deployments") or []:
        path, _, fn = str(deployment["entrypoint"]).rpartition(":")
        flow_name: str = load_flow_from_entrypoint(f"{prefect_yaml.parent / path}:{fn}").name
        names.append(f"{flow_name}/{deployment['name']}")
    return names


def sealed_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema, refusing any parameter it does not name."""
    return {**schema, "additionalProperties": False}


async def seal(names: list[str]) -> list[SealResult]:
    """Seal each named deployment on the Prefect API of this process's settings
    (``PREFECT_API_URL``); one already sealed and enforced is left as it is."""
    results = []
    async with get_client() as client:
        for name in names:
            deployment = await client.read_deployment_by_name(name)
            schema = dict(deployment.parameter_openapi_schema or {})
            changed = not (
                schema.get("additionalProperties") is False and deployment.enforce_parameter_schema
            )
            if changed:
                await client.update_deployment(
                    deployment.id,
                    DeploymentUpdate(
                        parameter_openapi_schema=sealed_schema(schema),
                        enforce_parameter_schema=True,
                    ),
                )
            results.append(SealResult(name, changed, tuple(schema.get("properties") or ())))
    return results


def seal_declared(prefect_yaml: Path) -> list[SealResult]:
    return asyncio.run(seal(declared_deployments(prefect_yaml)))
