"""Settings from the environment, one class per area (Prefect's style: `DAY0_<AREA>_<FIELD>`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["HubSettings", "LimitsSettings", "StoreSettings"]


class HubSettings(BaseSettings):
    """How model sources on the Hugging Face hub are resolved."""

    model_config = SettingsConfigDict(env_prefix="DAY0_HUB_")

    cache_dir: Path | None = Field(None, description="Hub cache (default: huggingface_hub's HF_HUB_CACHE).")
    offline: bool | None = Field(None, description="Force offline mode; default follows HF_HUB_OFFLINE.")


class LimitsSettings(BaseSettings):
    """Bounds on what a user hands day0, so a tiny input cannot cost unbounded time or memory."""

    model_config = SettingsConfigDict(env_prefix="DAY0_LIMITS_")

    max_file_bytes: int = Field(1 << 20, ge=1, description="Largest spec or config file read, bytes.")
    max_yaml_nodes: int = Field(
        100_000, ge=1, description="Most YAML nodes a document may expand to (aliases counted at their expanded size)."
    )


class StoreSettings(BaseSettings):
    """The S3-compatible artifact store endpoint; credentials follow boto3's usual chain."""

    model_config = SettingsConfigDict(env_prefix="DAY0_STORE_")

    endpoint_url: str | None = Field(None, description="S3 endpoint, e.g. http://127.0.0.1:7070.")
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None
