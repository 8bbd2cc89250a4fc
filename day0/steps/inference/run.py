"""Step 6 for a run: quantise, size the KV cache, serve with continuous batching and
benchmark against the SLO.

The served model is step 5's trained candidate checkpoint when step 5 ran, else the same
scaled-down model the trial would build (step 1's config scaled by `trial.scale`, initialised from
`trial.seed`), with the trial's tokenizer, which it copies into the run's store folder for the job
(the job never reads a path on the flow's host; the checkpoint is in the store already). This module
composes those values through the trial step's `run` module, so the rest of `day0.steps.inference`
takes plain data.
"""

from __future__ import annotations

from pathlib import Path

from day0.backends.base import run_step_job
from day0.core.result import Progress
from day0.runs.context import RunContext
from day0.spec.pipeline import PipelineSpec
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.inference.job import JOB
from day0.steps.inference.model import ServedModel
from day0.steps.inference.result import InferenceResult
from day0.steps.inference.serve import FullModel, InferenceRequest
from day0.steps.trial.result import TrialResult
from day0.steps.trial.run import scaled_model

__all__ = ["publish_tokenizer", "run", "served_model"]


def _checkpoint(spec: PipelineSpec, trained: TrialResult | None) -> str | None:
    """The candidate's last checkpoint as a directory or s3:// URI (Ray Train gives s3 paths without scheme)."""
    path = next((r.checkpoint_path for r in (trained.runs if trained else []) if r.role == "candidate"), None)
    if path is None:
        return None
    return f"s3://{path}" if spec.storage.startswith("s3://") and "://" not in path else path


def served_model(spec: PipelineSpec, analyzed: AnalyzeResult, trained: TrialResult | None = None) -> ServedModel:
    """What step 6 serves: step 5's checkpoint, else the scaled-down model step 5 would train."""
    config, data = scaled_model(spec.trial, analyzed.model.config)
    checkpoint = _checkpoint(spec, trained)
    what = (
        f"step 5's trained checkpoint of {analyzed.model.source}"
        if checkpoint
        else (f"{analyzed.model.source} scaled down as trial.scale says, untrained (seed {spec.trial.seed})")
    )
    return ServedModel(
        label=what, config=config, tokenizer=str(data.tokenizer_dir), seed=spec.trial.seed, checkpoint=checkpoint
    )


def publish_tokenizer(ctx: RunContext, directory: Path) -> str:
    """The tokenizer's files copied into the run's store folder; their folder's URL. The job reads them
    from there: on a cluster its pod cannot see the flow's disk."""
    store, folder = ctx.store, ctx.key("inference", "tokenizer")
    for path in sorted(directory.glob("*.json")):  # tokenizer.json and its configs (not the token-id cache)
        store.put_bytes(f"{folder}/{path.name}", path.read_bytes(), "application/json")
    return store.url(folder)


def run(
    ctx: RunContext, progress: Progress, analyzed: AnalyzeResult, trained: TrialResult | None = None
) -> InferenceResult:
    """Serve and benchmark step 5's model when it trained well (else the scaled-down one) on the run's
    platform, as a job on the run's backend (in this process locally; on the run's RayCluster on KubeRay)."""
    spec = ctx.spec
    served = served_model(spec, analyzed, trained)
    served = served.model_copy(update={"tokenizer": publish_tokenizer(ctx, Path(served.tokenizer))})
    request = InferenceRequest(
        model=analyzed.model.source,
        served=served,
        inference=spec.inference,
        platform=spec.platform,
        full_model=FullModel(
            label=analyzed.model.source, config=analyzed.model.config, params_total=analyzed.structure.params_total
        ),
    )
    return run_step_job(ctx.backend, "inference", JOB, request, progress)
