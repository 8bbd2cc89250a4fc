"""The result every step returns, and its verdict: one shape read by the flow (gating), the CLI's
exit code, the report's scorecard and the regression flow.

A subclass implements `judge()` from its own data; `verdict`, `reasons` and `headline` are
computed fields, so they are saved in `result.json` and can never disagree with the data behind
them. Like pytest's outcomes: `pass`, `warn` (passed, with something a person should read),
`fail`, `skipped` (not run, with the reason).
"""

import re
from collections.abc import Callable
from typing import ClassVar, Literal, TypeAlias

from pydantic import BaseModel, Field, computed_field

__all__ = [
    "Execution",
    "ExecutionEvent",
    "Judgement",
    "Progress",
    "StepResult",
    "TableRow",
    "Verdict",
    "progress_fraction",
    "worst",
]

TableRow: TypeAlias = dict[str, str | int | float | bool | None]
"""One row of a Prefect table artifact: a column name -> a scalar cell (None: empty)."""

# How a step (and the job it submits) reports progress: one line at a time.
Progress = Callable[[str], None]
# A progress line that says how far its step is: `... step 12/50 ...` (the trial's, even relayed from a job's log).
_STEP_OF = re.compile(r"\bstep (\d+)/(\d+)\b")


def progress_fraction(line: str) -> float | None:
    """How far a progress line says its step is, 0 to 1; None for a line that does not say."""
    match = _STEP_OF.search(line)
    if match is None or int(match[2]) == 0:
        return None
    return min(1.0, int(match[1]) / int(match[2]))


Verdict = Literal["pass", "warn", "fail", "skipped"]
_SEVERITY: dict[str, int] = {"pass": 0, "skipped": 1, "warn": 2, "fail": 3}


def worst(*verdicts: Verdict) -> Verdict:
    """The most severe of `verdicts` (fail > warn > skipped > pass); `pass` for none."""
    return max(verdicts, key=_SEVERITY.__getitem__, default="pass")


class Judgement(BaseModel):
    """A step's verdict with its reasons (one line each, with the numbers) and the few figures the
    scorecard shows (label -> formatted value)."""

    verdict: Verdict
    reasons: list[str] = Field(default=[])
    headline: dict[str, str] = Field(default={})
    unproven: list[str] = Field(
        default=[],
        description="Checks the step could not make here (a probe with no device to run on): the scorecard "
        "never shows its row PASS while one is listed.",
    )


class ExecutionEvent(BaseModel):
    """Something that happened to the cluster a step ran on (provisioning, node lost, pod replaced,
    recovered, deleted): the backend's events as plain data, for the result and the scorecard."""

    kind: str
    at: float = Field(description="Unix time, seconds.")
    message: str = ""
    pool: str | None = None
    pod: str | None = None
    node: str | None = None


class Execution(BaseModel):
    """Where and how a step's work ran: the backend, its cluster, the Ray job and the cluster's events."""

    backend: Literal["local", "kuberay"]
    cluster: str | None = Field(None, description="The RayCluster (kuberay) or Ray address the job ran on.")
    job_id: str | None = Field(None, description="The Ray job's submission id (None: ran in the flow's process).")
    duration_s: float | None = None
    events: list[ExecutionEvent] = Field(default=[])


class StepResult(BaseModel):
    """Base of every step's result. Subclasses set `STEP` and implement `judge` and `to_markdown`;
    `files` (plots, tables stored beside result.json) is optional. `execution` is filled in by the
    task that ran the step on a backend."""

    STEP: ClassVar[str] = ""

    execution: Execution | None = Field(None, description="Where the step's work ran, and the cluster's events.")

    def judge(self) -> Judgement:
        raise NotImplementedError(f"{type(self).__name__} must implement judge()")

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def verdict(self) -> Verdict:
        return self.judge().verdict

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def reasons(self) -> list[str]:
        return self.judge().reasons

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def headline(self) -> dict[str, str]:
        return self.judge().headline

    @property
    def passed(self) -> bool:
        """Not failed: `pass` and `warn` let the steps that need this one run."""
        return self.verdict in ("pass", "warn")

    def files(self) -> dict[str, bytes]:
        return {}

    def artifact_table(self) -> list[TableRow]:
        """Rows published as the step's table artifact (one per checked item); none by default."""
        return []

    def to_markdown(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} must implement to_markdown()")
