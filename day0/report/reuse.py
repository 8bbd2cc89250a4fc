"""What a reused step (status `cached`) stands on: the earlier attempt that computed it, how long the
step took there, and that attempt's wall time, so a rerun's report shows "reused" with the
original's time and never passes off a few seconds of loading as the pipeline's wall time.

Each report records its attempt's wall time (`reports/<attempt id>.json` in the run's folder); for
an attempt that left none (killed before its report), the span of its step records stands in.
"""

from __future__ import annotations

from typing import NamedTuple

from day0.runs.context import RunContext, RunManifest, StepRecord

__all__ = ["Origin", "origins", "record_wall_time", "reuse_summary"]


class Origin(NamedTuple):
    """The attempt (1-based) that executed a reused step, the step's seconds there, and the attempt's
    wall time (`measured`: from its report; else the span of its step records)."""

    attempt: int
    step_s: float
    attempt_wall_s: float
    measured: bool


def _key(ctx: RunContext, attempt_id: str) -> str:
    return ctx.key("reports", f"{attempt_id}.json")


def record_wall_time(ctx: RunContext, wall_s: float, manifest: RunManifest) -> None:
    """Remember this attempt's wall time for the reports of later attempts that reuse its steps."""
    attempt = ctx.attempt_id or next(reversed(manifest.attempt_ids), None)
    if attempt is not None:
        ctx.store.put_json(_key(ctx, attempt), {"wall_s": wall_s})


def _attempt_wall(ctx: RunContext, manifest: RunManifest, index: int) -> tuple[float, bool]:
    store, key = ctx.store, _key(ctx, manifest.attempt_ids[index])
    if store.exists(key):
        return float(store.get_json(key)["wall_s"]), True
    records = manifest.attempts[index]
    start = min(r.started_at for r in records)
    end = max(r.started_at.timestamp() + r.seconds for r in records)
    return end - start.timestamp(), False


def origins(ctx: RunContext, records: list[StepRecord], manifest: RunManifest) -> dict[str, Origin]:
    """step -> where it was computed, for each reused step of `records` (the report's attempt)."""
    cached = [r for r in records if r.status == "cached"]
    if not cached:
        return {}
    ids = manifest.attempt_ids
    current = ids.index(ctx.attempt_id) if ctx.attempt_id in ids else len(ids) - 1
    out: dict[str, Origin] = {}
    for r in cached:
        for i in range(current - 1, -1, -1):  # the latest earlier attempt that executed this code
            ran = next(
                (x for x in manifest.attempts[i] if x.step == r.step and x.status == "executed" and x.code == r.code),
                None,
            )
            if ran is not None:
                wall, measured = _attempt_wall(ctx, manifest, i)
                out[r.step] = Origin(i + 1, ran.seconds, wall, measured)
                break
    return out


def reuse_summary(records: list[StepRecord], found: dict[str, Origin]) -> str:
    """E.g. `all 6 steps reused, computed by attempt 1 in 140.8 s`; "" when nothing was reused."""
    reused = [r.step for r in records if r.status == "cached"]
    if not reused:
        return ""
    count = f"all {len(reused)} steps" if len(reused) == len(records) else f"{len(reused)} of {len(records)} steps"
    by_attempt = sorted({(o.attempt, o.attempt_wall_s, o.measured) for o in found.values()})
    walls = ", ".join(
        f"attempt {a} in {w:.1f} s" + ("" if measured else " (its steps' span)") for a, w, measured in by_attempt
    )
    unknown = len(reused) - len(found)
    return (
        f"{count} reused"
        + (f", computed by {walls}" if walls else "")
        + (f"; {unknown} computed by an attempt with no record" if unknown else "")
    )
