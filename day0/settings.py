"""Settings from the environment, one class per area (Prefect's style: `DAY0_<AREA>_<FIELD>`).

These are read by every `day0` process (the limits bound each YAML file a user hands day0), so they
are plain pydantic models filled from `os.environ`, not pydantic-settings models: importing
pydantic-settings (asyncio, dotenv, its cloud providers) cost a `day0 plan` process about 40% of
what importing pydantic and yaml costs; every settings class of day0 derives from `EnvSettings`, and a
model-valued field reads JSON (`Json[...]`). What these classes used of it is kept: a field reads
`<env_prefix><FIELD>` in any case, arguments win over the environment, values are validated (a bad
one is a `UsageError` naming the variable). A URL setting is parsed at start (`HttpUrlText`), so
`notaurl` is refused naming its variable instead of failing every call later.
"""

import os
from pathlib import Path
from typing import Annotated, ClassVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    field_validator,
    model_validator,
)

from day0.errors import UsageError
from day0.paths import CONFIGS_DIR

__all__ = ["EnvSettings", "HttpUrlText", "HubSettings", "LimitsSettings", "RunSettings", "StoreSettings", "http_url"]


class EnvSettings(BaseModel):
    """One settings area: a field not given as an argument comes from `<env_prefix><FIELD>`."""

    model_config = ConfigDict(extra="forbid")
    env_prefix: ClassVar[str]

    @model_validator(mode="wrap")
    @classmethod
    def _from_environment(cls, data: object, handler: ModelWrapValidatorHandler["EnvSettings"]) -> "EnvSettings":
        if not isinstance(data, dict):
            return handler(data)
        env = {name.upper(): value for name, value in os.environ.items()}
        variables = {field: f"{cls.env_prefix}{field}".upper() for field in cls.model_fields if field not in data}
        found = {field: env[var] for field, var in variables.items() if var in env}
        try:
            return handler({**found, **data})
        except ValidationError as exc:
            bad = [e for e in exc.errors() if e["loc"] and e["loc"][0] in found]
            if not bad or len(bad) < exc.error_count():  # a bad argument is the caller's bug: pydantic's error
                raise
            raise UsageError(
                "; ".join(f"{_where(variables, e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in bad)
            ) from None


def _where(variables: dict[str, str], loc: tuple[int | str, ...]) -> str:
    """The variable, and inside a JSON value the path to the bad entry (`DAY0_TRIAL_FAULTS.nan_at_stp`)."""
    return ".".join([variables[str(loc[0])], *map(str, loc[1:])])


def http_url(value: str) -> str:
    """`value` if it is an http(s) URL with a host (and a numeric port when one is given), else a
    `ValueError` saying what was expected (the value is not echoed: it may hold credentials)."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parses the port: a ValueError when it is not a number in range
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc}); expected http(s)://host[:port][/path]") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected http(s)://host[:port][/path]")
    return value


HttpUrlText = Annotated[str, AfterValidator(http_url)]


class HubSettings(EnvSettings):
    """How model sources on the Hugging Face hub are resolved."""

    env_prefix = "DAY0_HUB_"

    cache_dir: Path | None = Field(None, description="Hub cache (default: huggingface_hub's HF_HUB_CACHE).")
    offline: bool | None = Field(None, description="Force offline mode; default follows HF_HUB_OFFLINE.")


class LimitsSettings(EnvSettings):
    """Bounds on what a user hands day0, so a tiny input cannot cost unbounded time or memory."""

    env_prefix = "DAY0_LIMITS_"

    # Upper bounds too: a typo (a 100 GB limit) would be obeyed until memory ran out.
    max_file_bytes: int = Field(
        1 << 20, ge=1, le=1 << 30, description="Largest spec or config file read, bytes (at most 1 GiB)."
    )
    max_yaml_nodes: int = Field(
        100_000,
        ge=1,
        le=100_000_000,
        description="Most YAML nodes a document may expand to (aliases counted at their expanded size).",
    )


def _path_list(value: object) -> object:
    """A `DAY0_*` list of folders is written as PATH is: separated by os.pathsep."""
    return [part for part in value.split(os.pathsep) if part] if isinstance(value, str) else value


class RunSettings(EnvSettings):
    """How often a deployed flow run is started again after its process died (`flows.recovery`), how
    often a running flow looks for a cancellation requested through Prefect (`flows.adapt`), how long a
    run's lock is its own without renewal (`day0.runs.lock`), and where
    the spec files that flow parameters name may be (`day0.spec.location`)."""

    env_prefix = "DAY0_RUN_"

    max_attempts: int = Field(
        3, ge=1, le=20, description="Attempts of one flow run: a rerun after a crash past this many fails at once."
    )
    cancel_poll_s: float = Field(
        3.0,
        gt=0,
        le=3600,
        description="Seconds between a flow run's reads of its own state, to stop once it is Cancelling or Cancelled.",
    )
    crash_settle_s: float = Field(
        60.0,
        ge=10,  # Prefect's least window for a proactive trigger
        le=3600,
        description=(
            "Seconds the recovery automation waits after a crash before it reschedules the run, so that every "
            "report of one death (a process worker's comes after the flow's crash hooks ran) lands on the "
            "Crashed run, not on its rerun."
        ),
    )
    lease_s: float = Field(
        30.0,
        ge=1,
        le=600,
        description=(
            "Seconds a run's lock stays its own without renewal (renewed every third of it). A run whose pod "
            "died is taken over this long after its last renewal: a rerun on another host waits at most this "
            "long; hosts' clocks must agree to well within it."
        ),
    )
    spec_roots: Annotated[list[Path], BeforeValidator(_path_list)] = Field(
        default_factory=lambda: [CONFIGS_DIR],
        min_length=1,
        description="Folders (os.pathsep-separated) holding the spec files a flow parameter may name.",
    )


class StoreSettings(EnvSettings):
    """The S3-compatible artifact store endpoint; credentials follow boto3's usual chain."""

    env_prefix = "DAY0_STORE_"

    endpoint_url: HttpUrlText | None = Field(None, description="S3 endpoint, e.g. http://127.0.0.1:7070.")
    region: str = "us-east-1"
    access_key_id: str | None = None
    secret_access_key: str | None = None

    @field_validator("access_key_id", "secret_access_key")
    @classmethod
    def _stripped(cls, value: str | None) -> str | None:
        """A key from a Secret made `--from-file` ends with the file's newline, and every request was refused."""
        return value.strip() if value is not None else None
