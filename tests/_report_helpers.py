"""A run of the default spec, rebuilt in a test's store from the results a real `make run` left
(tests/data/report/tiny-local.jsonl), so the report tests render real figures in a second.

Each step's result is validated by today's result models, so its verdict, reasons, headline,
Markdown and plots are computed by the code under test; only the measurements are recorded.
Refresh the data after a `make run` (or `day0 run configs/pipelines/tiny-local.yaml`):

    .venv/bin/python -m tests._report_helpers .day0/runs/tiny-deepseek-v3-on-cpu/<run id>
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import yaml

from day0.core.result import StepResult
from day0.runs.context import RunContext, StepRecord
from day0.spec.pipeline import spec_from_dict
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.inference.result import InferenceResult
from day0.steps.operators.result import OperatorsResult
from day0.steps.optimize.result import OptimizationReport
from day0.steps.parallel.result import PlanReport
from day0.steps.trial.result import TrialResult

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests/data/report/tiny-local.jsonl"
TYPES: dict[str, type[StepResult]] = {
    "analyze": AnalyzeResult,
    "operators": OperatorsResult,
    "parallel": PlanReport,
    "optimize": OptimizationReport,
    "trial": TrialResult,
    "inference": InferenceResult,
}
_COMPUTED = ("verdict", "reasons", "headline")  # recomputed from the data on load


def default_spec(store: str) -> dict:
    spec = yaml.safe_load((REPO / "configs/pipelines/tiny-local.yaml").read_text())
    return {**spec, "storage": store}


def recorded_run(tmp_path: Path) -> tuple[RunContext, list[str], float]:
    """(context, steps, wall time) of the default spec's recorded run, stored under `tmp_path` as
    the pipeline stores it: each step's files, result.md, result.json and its attempt record."""
    lines = DATA.read_text().splitlines()
    meta = json.loads(lines[0])
    ctx = RunContext.create(spec_from_dict(default_spec(f"file://{tmp_path}/store")))
    ctx.begin_attempt()
    store, steps = ctx.store, []
    for line in lines[1:]:
        entry = json.loads(line)
        step, result = entry["step"], TYPES[entry["step"]].model_validate(entry["result"])
        for name, data in result.files().items():
            store.put_bytes(ctx.key(step, name), data)
        store.put_text(ctx.key(step, "result.md"), result.to_markdown(), "text/markdown")
        store.put_json(ctx.key(step, "result.json"), result.model_dump(mode="json"))
        record = StepRecord(
            step=step,
            status="executed",
            started_at=dt.datetime.fromisoformat(entry["started_at"]),
            seconds=entry["seconds"],
            verdict=result.verdict,
            reasons=result.reasons,
            code=entry["code"],
        )
        ctx.record(record)
        steps.append(step)
    return ctx, steps, meta["wall_s"]


def capture(run_dir: Path) -> str:
    """The data file's text from a run folder of the default spec: its latest attempt that executed
    every step (a rerun's attempt only reuses them)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    index = max(i for i, a in enumerate(manifest["attempts"]) if a and all(r["status"] == "executed" for r in a))
    records, attempt = manifest["attempts"][index], manifest["attempt_ids"][index]
    wall = json.loads((run_dir / "reports" / f"{attempt}.json").read_text())["wall_s"]
    meta = {
        "source": f"a `make run` of configs/pipelines/tiny-local.yaml (run {manifest['run_id']}, attempt "
        f"{index + 1}), day0 {manifest['day0_version']}, on a shared 2-core machine (its timings are a busy "
        "machine's), captured by tests/_report_helpers.py",
        "wall_s": round(wall, 1),
    }
    out = [json.dumps(meta)]
    store = run_dir.resolve().parents[2]  # <store>/runs/<name>/<run id>
    for r in records:
        result = json.loads((run_dir / r["step"] / "result.json").read_text())
        data = {k: v for k, v in result.items() if k not in _COMPUTED}
        entry = {"step": r["step"], "started_at": r["started_at"], "seconds": r["seconds"], "code": r["code"]}
        line = json.dumps({**entry, "result": data}, separators=(",", ":"))
        # this machine's paths made the default's: the store `.day0`, the repository's files relative
        out.append(line.replace(f"file://{store}", "file://.day0").replace(str(store), ".day0").replace(f"{REPO}/", ""))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(capture(Path(sys.argv[1])))
    print(f"wrote {DATA.relative_to(REPO)}")
