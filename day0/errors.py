"""User-facing errors. Each names the input and the field at fault; the CLI maps them to exit 2."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

__all__ = [
    "CorruptRecord",
    "Day0Error",
    "ModelError",
    "PluginError",
    "RunFailed",
    "SpecError",
    "SpecIssue",
    "StoreError",
    "StoreUnavailable",
    "UsageError",
    "shorten",
]


class Day0Error(Exception):
    """Base of errors caused by user input (exit code 2), as opposed to bugs."""

    exit_code = 2


class UsageError(Day0Error):
    pass


def shorten(value: object, limit: int = 120) -> str:
    """`repr(value)` cut to `limit` characters: messages never echo unbounded input."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


@dataclass(frozen=True)
class SpecIssue:
    field: str
    message: str

    @classmethod
    def from_pydantic(cls, err: ErrorDetails) -> SpecIssue:
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-after", "literal[")))
        message = err["msg"]
        if err["type"] == "extra_forbidden":
            message = "unknown field (not allowed here)"
        elif "input" in err and err["type"] not in ("missing",):
            message = f"{message} (got {shorten(err['input'])})"
        return cls(loc, message)

    def __str__(self) -> str:
        return f"{self.field or '<root>'}: {self.message}"


class SpecError(Day0Error):
    def __init__(self, source: str, issues: list[SpecIssue]):
        self.source = source
        self.issues = issues
        lines = "\n".join(f"  - {issue}" for issue in issues)
        super().__init__(f"{source}: {len(issues)} error(s)\n{lines}")


class ModelError(Day0Error):
    """A model source, config or architecture that cannot be analysed."""

    def __init__(self, model: str, field: str | None, message: str):
        self.model, self.field = model, field
        where = f" (field {field!r})" if field else ""
        shown = model if len(model) <= 200 else f"{model[:197]}..."
        super().__init__(f"model {shown}{where}: {message}")


class StoreError(Day0Error):
    pass


class CorruptRecord(StoreError):
    """A stored record that is not what day0 wrote there (not JSON, or not the record's shape): named by
    its URL, with a way out (`remedy`) that the reader who knows the record may replace."""

    def __init__(self, url: str, why: str, remedy: str = "delete it (day0 writes it again)"):
        self.url, self.why, self.remedy = url, why, remedy
        super().__init__(f"{url} is corrupt ({why}); {remedy}")

    def with_remedy(self, remedy: str) -> CorruptRecord:
        return CorruptRecord(self.url, self.why, remedy)


class StoreUnavailable(StoreError):
    """A well-formed store URI whose store did not answer (endpoint down, no such bucket, no access):
    a failure while running, not bad input, so exit 1."""

    exit_code = 1


class PluginError(Day0Error):
    """A platform's vendor plugin that is installed but fails to load (its module raises on import):
    a broken environment, reported with the module and its error instead of emulating the device on
    the host. A failure while running, exit 1."""

    exit_code = 1


class RunFailed(Exception):
    """A run whose steps failed (a failed verdict or a step that raised): not a usage error, exit 1.
    `summary` is the run summary as plain data (so the exception pickles across Prefect)."""

    exit_code = 1

    def __init__(self, message: str, summary: dict[str, object]):
        super().__init__(message, summary)
        self.message, self.summary = message, summary

    def __str__(self) -> str:
        return self.message
