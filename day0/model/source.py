"""Resolve a model source to a local directory holding config.json (and code files, never weights),
and decide once whether its own modelling code may run.

Sources: a name in configs/models/, a local directory, or `hf://org/name[@revision]` through
huggingface_hub (config, code, tokenizer and weight-index files, never weights; honours
HF_HUB_OFFLINE / DAY0_HUB_OFFLINE). A hub reference the hub cache (DAY0_HUB_CACHE_DIR, else
huggingface_hub's HF_HUB_CACHE) cannot give, with the hub offline or unreachable, is then looked up in
`configs/hub/`, a hub-layout cache shipped with day0 (`BUNDLED_HUB_CACHE`: the README's showcase
model), through the same huggingface_hub call.

Contract: `resolve_model(spec.model)` is the one resolver every path uses (steps, `day0 analyze`,
`day0 plan`); step 1 stores its `ResolvedModel` in its result and later steps build from that,
never from the spec's source again.
"""

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from day0.core.typing import HFConfigDict
from day0.errors import ModelError
from day0.paths import CONFIGS_DIR
from day0.settings import HubSettings, LimitsSettings

__all__ = [
    "BUNDLED_HUB_CACHE",
    "HUB_ALLOW_PATTERNS",
    "ModelChoice",
    "ResolvedModel",
    "hub_reference",
    "remote_code_allowed",
    "resolve_model",
    "resolve_model_source",
]

# Config, modelling code, tokenizer and the weights' index (step 1 checks them): weights are never fetched.
HUB_ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "*.py",
    "tokenizer_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "chat_template.jinja",
    "model.safetensors.index.json",
]
# A hub cache, laid out as huggingface_hub lays out its own, of the configs day0 ships (read-only).
BUNDLED_HUB_CACHE = CONFIGS_DIR / "hub"


_HUB_REF = re.compile(r"^hf://([A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?:@([\w][\w./-]{0,199}))?$")


def hub_reference(source: str) -> tuple[str, str]:
    """(repo_id, revision) of `hf://org/name[@revision]`; ValueError saying the form otherwise."""
    match = _HUB_REF.match(source)
    if not match or "--" in match[1] or ".." in source:
        raise ValueError("expected hf://org/name[@revision] (org and name of letters, digits, '-', '_', '.')")
    return match[1], match[2] or "main"


class ModelChoice(Protocol):
    """What the spec's `model:` section says about a source (`day0.spec.ModelSpec`)."""

    @property
    def source(self) -> str: ...
    @property
    def trust_remote_code(self) -> bool: ...
    @property
    def trusted_orgs(self) -> Sequence[str]: ...


class ResolvedModel(BaseModel):
    """A model source resolved to files on this machine: what step 1 read and later steps build from."""

    source: str = Field(description="The spec's model.source, as written.")
    directory: Path = Field(description="Local directory holding config.json (and code files).")
    config: HFConfigDict = Field(description="config.json as read.")
    repo_id: str | None = None
    revision: str | None = Field(None, description="Hub revision asked for (hf:// sources).")
    commit: str | None = Field(None, description="Hub commit the revision resolved to, when known.")
    trust_remote_code: bool = Field(False, description="Whether the repo's own modelling code may run.")

    @property
    def org(self) -> str | None:
        return self.repo_id.split("/")[0] if self.repo_id and "/" in self.repo_id else None


def hub_offline(settings: HubSettings) -> bool:
    """Whether the hub is off limits: `DAY0_HUB_OFFLINE`, else huggingface_hub's HF_HUB_OFFLINE."""
    if settings.offline is not None:
        return settings.offline
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def _from_hub(source: str, settings: HubSettings) -> tuple[Path, str, str]:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        repo_id, revision = hub_reference(source)
    except ValueError as exc:
        raise ModelError(source, "model.source", str(exc)) from None

    def snapshot(cache_dir: Path | None, offline: bool) -> str:
        return snapshot_download(
            repo_id, revision=revision, allow_patterns=HUB_ALLOW_PATTERNS, cache_dir=cache_dir, local_files_only=offline
        )

    try:
        try:
            path = snapshot(settings.cache_dir, hub_offline(settings))
        except LocalEntryNotFoundError:  # not cached, and the hub is offline or did not answer
            path = snapshot(BUNDLED_HUB_CACHE, True)
    except LocalEntryNotFoundError:
        raise ModelError(
            source,
            "model.source",
            f"revision {revision!r} of {repo_id} is not in the local hub cache and the hub is offline "
            f"(HF_HUB_OFFLINE) or unreachable, nor in {BUNDLED_HUB_CACHE}; pre-fetch its config or go online",
        ) from None
    except (HfHubHTTPError, OSError) as exc:
        raise ModelError(source, "model.source", f"could not fetch from the hub: {exc}") from None
    return Path(path), repo_id, revision


def _commit_of(directory: Path) -> str | None:
    """The commit a hub snapshot directory belongs to (huggingface_hub names them by commit)."""
    name = directory.name
    return name if directory.parent.name == "snapshots" and len(name) == 40 else None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name too long for the filesystem: no such model
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


def resolve_model_source(source: str, settings: HubSettings | None = None) -> ResolvedModel:
    settings = settings or HubSettings()
    repo_id = revision = None
    if source.startswith("hf://"):
        directory, repo_id, revision = _from_hub(source, settings)
    elif _is_file(CONFIGS_DIR / "models" / source / "config.json"):
        directory = CONFIGS_DIR / "models" / source
    elif _is_dir(Path(source)):
        directory = Path(source)
    else:
        known = sorted(p.parent.name for p in (CONFIGS_DIR / "models").glob("*/config.json"))
        raise ModelError(source, "model.source", f"not a directory, hf:// reference, or one of {known}")
    config_path = directory / "config.json"
    if not config_path.exists():
        raise ModelError(source, "config.json", f"no config.json in {directory}")
    from day0.yamlio import read_user_json

    limit = LimitsSettings().max_file_bytes
    if not config_path.is_file() or config_path.stat().st_size > limit:
        raise ModelError(source, "config.json", f"not a file of at most {limit} bytes (DAY0_LIMITS_MAX_FILE_BYTES)")
    try:
        config = read_user_json(config_path)
    except ValueError as exc:  # too big, not UTF-8, too deep, malformed: named by the reader
        raise ModelError(source, "config.json", str(exc)) from None
    if not isinstance(config, dict):
        raise ModelError(source, "config.json", "expected a JSON object")
    return ResolvedModel(
        source=source,
        directory=directory,
        config=config,
        repo_id=repo_id,
        revision=revision,
        commit=_commit_of(directory) if repo_id else None,
    )


def remote_code_allowed(model: ModelChoice, resolved: ResolvedModel) -> bool:
    """The one place that decides whether a repo's own modelling code may run: only when the spec
    turns it on and the source's org is listed in `model.trusted_orgs`."""
    if not model.trust_remote_code:
        return False
    if resolved.org is None or resolved.org not in model.trusted_orgs:
        raise ModelError(
            model.source,
            "model.trusted_orgs",
            f"trust_remote_code is on but org {resolved.org!r} is not in trusted_orgs",
        )
    return True


def resolve_model(model: ModelChoice, settings: HubSettings | None = None) -> ResolvedModel:
    """Resolve `model.source` and decide remote code (the one resolver): raises `ModelError` when
    trust is asked for an org outside `model.trusted_orgs`."""
    resolved = resolve_model_source(model.source, settings)
    return resolved.model_copy(update={"trust_remote_code": remote_code_allowed(model, resolved)})
