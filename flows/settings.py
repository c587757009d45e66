"""Settings of the flows: where the Console is and the API token they act with."""

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class FlowSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PROXIMA_", extra="ignore")

    console_url: str = Field(default="http://127.0.0.1:8700", description="The Console's API")
    console_token: SecretStr = Field(
        default=SecretStr(""),
        description="API token (rollouts:write, agents:write as the flow needs); set it in the "
        "work pool's environment, never as a flow parameter",
    )
    console_timeout_seconds: float = 30.0
