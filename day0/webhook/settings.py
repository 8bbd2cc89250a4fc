"""The receiver's settings (`DAY0_WEBHOOK_*`) and its watch configuration (configs/webhook/watch.yaml)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from day0.errors import SpecError, SpecIssue
from day0.paths import CONFIGS_DIR
from day0.settings import EnvSettings
from day0.webhook.payload import WatchList

__all__ = ["WatchConfig", "WebhookSettings", "load_watch"]


class WebhookSettings(EnvSettings):
    env_prefix = "DAY0_WEBHOOK_"

    secret: SecretStr = Field(description="Shared secret the hub sends verbatim in X-Webhook-Secret.")
    watch: Path = Field(CONFIGS_DIR / "webhook" / "watch.yaml", description="Watch config YAML.")
    store: str = Field("file://.day0", description="Artifact store URI holding the dedupe records.")
    max_body_bytes: int = Field(256 * 1024, gt=0, description="Bodies above this get 413, unread beyond it.")
    stale_claim_s: float = Field(
        120, gt=0, description="A claim with no run id after this long is retried (its receiver died)."
    )
    max_concurrent_triggers: int = Field(
        4, ge=1, description="Flow runs created at once; more wait (a SQLite Prefect server locks when flooded)."
    )
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)


class WatchConfig(BaseModel):
    """What the receiver watches and what it triggers."""

    model_config = ConfigDict(extra="forbid")

    watch: WatchList
    deployment: str = Field("adapt/release", description="'flow/deployment' run for each new model commit.")
    template: Path = Field(description="Spec template (YAML); model.source is set to hf://org/name@sha.")

    def build_spec(self, repo: str, sha: str) -> dict[str, Any]:
        """The template with the model pinned to the commit and a name saying which commit it is."""
        spec = dict(yaml.safe_load(self.template.read_text()))
        model = dict(spec.get("model") or {})
        model["source"] = f"hf://{repo}@{sha}"
        slug = re.sub(r"[^a-z0-9]+", "-", repo.lower()).strip("-")[:50].rstrip("-")
        name = f"{slug}-{sha[:12]}"  # a DNS label: at most 63 characters
        return spec | {"model": model, "metadata": {**(spec.get("metadata") or {}), "name": name}}


def load_watch(path: Path) -> WatchConfig:
    raw = yaml.safe_load(path.read_text())
    if isinstance(raw, dict) and "template" in raw:
        raw["template"] = (path.parent / raw["template"]).resolve()
    try:
        config = WatchConfig.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(str(path), [SpecIssue.from_pydantic(dict(e)) for e in exc.errors()]) from None
    if not config.template.is_file():
        raise SpecError(str(path), [SpecIssue("template", f"{config.template} does not exist")])
    return config
