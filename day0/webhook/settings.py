"""The receiver's settings (`DAY0_WEBHOOK_*`) and its watch configuration (configs/webhook/watch.yaml).

Contract: `WebhookSettings` strips the secret's surrounding whitespace (a Secret made `--from-file`
ends with the file's newline, which no HTTP header can carry: every delivery got 401) and refuses one
shorter than `MIN_SECRET_BYTES` bytes (UTF-8) after that, or holding a control character, so an empty
or unset secret (a Helm Secret made from an unset variable) can never turn authentication off; the
message names DAY0_WEBHOOK_SECRET and never shows the value. Every limit has an upper bound too, so a
typo (`DAY0_WEBHOOK_MAX_BODY_BYTES=100000000000`) is refused at start rather than obeyed.
`load_watch(path)` reads the watch file and its spec template through `day0.yamlio.read_user_yaml`
(bounded, duplicate keys refused) and raises `SpecError` (exit 2) naming the file and field for
anything that is not a usable config, including a template that is not a mapping, or not a YAML file
beside the watch file or inside DAY0_RUN_SPEC_ROOTS (`day0.spec.location`); the template is read
once, at start-up.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PrivateAttr, SecretStr, ValidationError, field_validator

from day0.errors import SpecError, SpecIssue
from day0.paths import CONFIGS_DIR
from day0.settings import EnvSettings
from day0.spec.location import spec_file
from day0.webhook.payload import WatchList
from day0.yamlio import read_user_yaml

__all__ = ["MIN_SECRET_BYTES", "WatchConfig", "WebhookSettings", "load_watch"]

MIN_SECRET_BYTES = 16


class WebhookSettings(EnvSettings):
    env_prefix = "DAY0_WEBHOOK_"

    secret: SecretStr = Field(
        description=f"Shared secret the hub sends verbatim in X-Webhook-Secret; at least {MIN_SECRET_BYTES} bytes."
    )
    watch: Path = Field(CONFIGS_DIR / "webhook" / "watch.yaml", description="Watch config YAML.")
    store: str = Field("file://.day0", description="Artifact store URI holding the claims and the queue.")
    max_body_bytes: int = Field(
        256 * 1024, gt=0, le=16 << 20, description="Bodies above this get 413, unread beyond it (at most 16 MiB)."
    )
    body_timeout_s: float = Field(10, gt=0, le=600, description="A body not fully received within this gets 408.")
    store_timeout_s: float = Field(10, gt=0, le=600, description="A store call slower than this answers 503.")
    store_threads: int = Field(16, ge=1, le=256, description="Threads running blocking store calls off the event loop.")
    trigger_timeout_s: float = Field(30, gt=0, le=600, description="A Prefect call slower than this is retried later.")
    health_timeout_s: float = Field(
        1, gt=0, le=30, description="Longest wait for Prefect's health check before a release is queued anyway."
    )
    max_concurrent_triggers: int = Field(
        4,
        ge=1,
        le=256,
        description="Flow runs created at once; more wait (a SQLite Prefect server locks when flooded).",
    )
    retry_max_s: float = Field(60, gt=0, le=86_400, description="Longest wait between two tries of a failed trigger.")
    rescan_s: float = Field(
        60, gt=0, le=86_400, description="How often the store's queue is rescanned for entries another receiver left."
    )
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)

    @field_validator("secret")
    @classmethod
    def _usable(cls, secret: SecretStr) -> SecretStr:
        value = secret.get_secret_value().strip()  # what an HTTP header can carry: see the module contract
        size = len(value.encode())
        if size < MIN_SECRET_BYTES:
            raise ValueError(
                f"must be at least {MIN_SECRET_BYTES} bytes without surrounding whitespace, got {size}: an empty "
                "or short secret would let anyone trigger runs"
            )
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            raise ValueError("holds a control character (a line break?): no HTTP header can carry it")
        return SecretStr(value)


class WatchConfig(BaseModel):
    """What the receiver watches and what it triggers."""

    model_config = ConfigDict(extra="forbid")

    watch: WatchList
    deployment: str = Field(
        "adapt/release", pattern=r"^[^/]+/[^/]+$", description="'flow/deployment' run for each new model commit."
    )
    template: Path = Field(description="Spec template (YAML); model.source is set to hf://org/name@sha.")
    _spec: dict[str, JsonValue] | None = PrivateAttr(None)

    def template_spec(self) -> dict[str, JsonValue]:
        """The template's mapping, read (and checked) once."""
        if self._spec is None:
            self._spec = _read_template(self.template)
        return self._spec

    def build_spec(self, repo: str, sha: str) -> dict[str, JsonValue]:
        """The template with the model pinned to the commit and a name saying which commit it is."""
        spec = copy.deepcopy(self.template_spec())
        model = spec.get("model")  # a mapping, or a source string that the pinned one replaces
        pinned = {**(model if isinstance(model, dict) else {}), "source": f"hf://{repo}@{sha}"}
        slug = re.sub(r"[^a-z0-9]+", "-", repo.lower()).strip("-")[:50].rstrip("-")
        name = f"{slug}-{sha[:12]}"  # a DNS label: at most 63 characters
        metadata = spec.get("metadata")
        return spec | {"model": pinned, "metadata": {**(metadata if isinstance(metadata, dict) else {}), "name": name}}


def _read_template(path: Path) -> dict[str, JsonValue]:
    raw = read_user_yaml(path)
    if not isinstance(raw, dict):
        raise SpecError(str(path), [SpecIssue("", f"expected a spec mapping, got {type(raw).__name__}")])
    shapes: list[tuple[str, tuple[type, ...], str]] = [
        ("model", (dict, str), "a mapping or a source string"),
        ("metadata", (dict,), "a mapping"),
    ]
    issues = [
        SpecIssue(field, f"expected {what}, got {type(raw[field]).__name__}")
        for field, types, what in shapes
        if raw.get(field) is not None and not isinstance(raw[field], types)
    ]
    if issues:
        raise SpecError(str(path), issues)
    return raw


def load_watch(path: Path) -> WatchConfig:
    raw = read_user_yaml(path)
    if isinstance(raw, dict) and isinstance(raw.get("template"), str):
        raw["template"] = (path.parent / raw["template"]).resolve()
    try:
        config = WatchConfig.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(str(path), [SpecIssue.from_pydantic(e) for e in exc.errors()]) from None
    if not config.template.is_file():
        raise SpecError(str(path), [SpecIssue("template", f"{config.template} does not exist")])
    # a YAML spec beside the watch file or inside DAY0_RUN_SPEC_ROOTS, never any file the process can read
    config.template = spec_file(config.template, f"{path}: template", also=[path.resolve().parent])
    config.template_spec()
    return config
