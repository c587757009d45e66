"""Settings of the flows: where the Console is and the API token they act with."""

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.vocabulary import Scope

#: The scopes of the worker's ``PROXIMA_CONSOLE_TOKEN``: everything the five flows call, together
#: (the audit reads rollouts; fleet-rollout drives them; identity-release and the migration release
#: identities; enrollment-check and the migration read clusters). docs/flows.md lists exactly
#: these, and the flow tests run with a token holding exactly these.
WORKER_SCOPES: tuple[Scope, ...] = (
    Scope.AGENTS_READ,
    Scope.AGENTS_WRITE,
    Scope.CLUSTERS_READ,
    Scope.ROLLOUTS_READ,
    Scope.ROLLOUTS_WRITE,
)


class FlowSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PROXIMA_", extra="ignore")

    console_url: str = Field(default="http://127.0.0.1:8700", description="The Console's API")
    console_token: SecretStr = Field(
        default=SecretStr(""),
        description="API token with the scopes in WORKER_SCOPES; set it in the work pool's "
        "environment, never as a flow parameter",
    )
    console_timeout_seconds: float = 30.0
