"""Step 5 benchmark: training tokens/s under day0 (Ray Train, 1 worker) vs the same model and loop
as a bare PyTorch script, in one run; the time to recover after a node kill; and the cost model's
prediction of the default pipeline's candidate (datasheet and freshly calibrated) against its run.

    python -m benchmarks.run trial

Both throughput numbers are steady state: tokens per step over the median step time after the first
2 steps (start-up and checkpoint uploads are reported apart, as wall times). The bare script runs
before and after the day0 run and the baseline is their mean, so drift in the machine's load over
the run does not land on one side only.

The cost check (`cost_check`) calibrates the CPU into a temporary store (`day0 calibrate cpu`'s
function), trains `configs/pipelines/tiny-local.yaml`'s candidate as step 5 does (Ray Train, its
workers, dtype, micro-batch), and predicts it with `predict_trial` from both figures. Step time is
measured as step 5 measures it (steady tokens/s). Peak memory two ways: the process RSS growth the
trial reports, and the training state counted from the tensors (parameters, gradients and AdamW
states, exact; the saved activations' unique storages at the end of the forward, through
`torch.autograd.graph.saved_tensors_hooks`), which is what the cost model's memory terms describe.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.nn.functional as F

from day0.model.source import resolve_model_source
from day0.steps.trial.config import TrialScale
from day0.steps.trial.data import batch_for_step, prepare_data
from day0.steps.trial.faults import TrialFaults
from day0.steps.trial.loop import LoopConfig
from day0.steps.trial.model import build_trial_model, scale_config

STEPS, SEQ, BATCH = 40, 64, 8
COST_STEPS, COST_SPEC = 30, "configs/pipelines/tiny-local.yaml"
TARGETS = {"step_time": 0.20, "peak_memory": 0.10}
SCALE = TrialScale(layers=2, hidden=128, experts=4)


def _loop_config(data) -> LoopConfig:
    cfg = scale_config(
        resolve_model_source("tiny-deepseek-v3").config,
        SCALE,
        vocab_size=data.vocab_size,
        seq_len=SEQ,
        eos_token_id=data.eos_token_id,
    )
    return LoopConfig(
        model_config_dict=cfg,
        steps=STEPS,
        global_batch=BATCH,
        micro_batch=BATCH,
        seq_len=SEQ,
        learning_rate=1e-3,
        checkpoint_every=STEPS,
    )


def bare_pytorch(loop: LoopConfig, tokens) -> dict:
    """The same model, data and optimizer in a plain loop: no Ray, no day0 loop."""
    torch.set_num_threads(1)
    tokens = torch.as_tensor(tokens)
    model = build_trial_model(loop.model_config_dict, seed=loop.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=loop.learning_rate, weight_decay=0.0)
    times, last = [], time.perf_counter()
    for step in range(loop.steps):
        batch = batch_for_step(tokens, step, loop.global_batch, loop.seq_len, loop.seed)
        logits = model(input_ids=batch[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), loop.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        now = time.perf_counter()
        times.append(now - last)
        last = now
    return {"tokens_per_s": loop.global_batch * loop.seq_len / statistics.median(times[2:]), "final_loss": float(loss)}


def day0_ray(loop: LoopConfig, tokens, storage: str) -> dict:
    from day0.backends.local.ray import connect
    from day0.steps.trial.ray_train import run_training
    from day0.steps.trial.result import steady_tokens_per_s

    connect(num_cpus=2)
    t0 = time.time()
    run = run_training(loop, tokens, name="bench", storage_uri=storage, workers=1)
    first = next(e.time for e in run.events if e.kind == "first_step")
    return {
        "tokens_per_s": steady_tokens_per_s(run.history),
        "final_loss": run.history[-1].loss,
        "wall_s": round(time.time() - t0, 1),
        "startup_s": round(first - t0, 1),
    }


def recovery(loop: LoopConfig, tokens, storage: str) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from day0.steps.trial.result import recoveries
    from testsupport.chaos import run_with_node_kill

    ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={"trial_worker": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        killed = loop.model_copy(update={"steps": 12, "checkpoint_every": 4})
        run = run_with_node_kill(
            cluster,
            killed,
            tokens,
            name="bench-kill",
            storage_uri=storage,
            kill_after_checkpoint_step=4,
            hooks=TrialFaults(step_delay_s=0.3),
        )
        [rec] = recoveries(run.events)
        return {
            "recovery_s": round(rec.recovery_s, 1),
            "resumed_from_step": rec.resumed_from_step,
            "restart_after_kill_s": round(rec.restarted_at - rec.failed_at, 1),
            "error": run.error,
        }
    finally:
        ray.shutdown()
        cluster.shutdown()


def _candidate(data):
    """The default pipeline's candidate loop and its scaled config (as step 5 builds them)."""
    from day0.spec.pipeline import load_spec
    from day0.steps.trial.train import TrialPlan, candidate_loop

    spec = load_spec(COST_SPEC)
    source = resolve_model_source(spec.model.source)
    cfg = scale_config(
        source.config,
        spec.trial.scale,
        vocab_size=data.vocab_size,
        seq_len=spec.trial.seq_len,
        eos_token_id=data.eos_token_id,
    )
    loop = candidate_loop(spec, cfg, TrialPlan()).model_copy(
        update={"steps": COST_STEPS, "checkpoint_every": COST_STEPS}
    )
    return spec, cfg, loop


def _error(predicted: float, measured: float) -> float:
    return round(predicted / measured - 1, 3)


def cost_check(data, storage: str, store_uri: str) -> dict:
    """Calibrate, train the candidate, predict it from the datasheet and the profile (see the module doc)."""
    from day0.calibration import calibrate
    from day0.spec.pipeline import load_platform
    from day0.steps.trial.ray_train import run_training
    from day0.steps.trial.result import steady_tokens_per_s
    from day0.steps.trial.run import PlannerMemoryEstimate
    from day0.steps.trial.train import TrialPlan
    from day0.store import open_store

    spec, cfg, loop = _candidate(data)
    calibration = calibrate(load_platform(spec.platform.name), 2, open_store(store_uri))
    workers = spec.trial.workers
    run = run_training(loop, data.tokens, name="bench-cost", storage_uri=storage, workers=workers)
    if run.error:
        raise RuntimeError(f"the candidate run failed: {run.error}")
    step_s = loop.global_batch * loop.seq_len / (steady_tokens_per_s(run.history) or float("nan"))
    baseline = {e.rank: e.baseline_bytes or 0 for e in run.events if e.kind == "memory"}
    rss = max(peak - baseline.get(rank, 0) for rank, peak in run.peak_memory_bytes.items())
    counted = max(e.tensor_bytes or 0 for e in run.events if e.kind == "memory")  # the loop's own count
    out: dict = {
        "load_average_1m": round(os.getloadavg()[0], 2),
        "config": {
            "spec": COST_SPEC,
            "workers": workers,
            "micro_batch": loop.micro_batch,
            "seq_len": loop.seq_len,
            "compute_dtype": loop.compute_dtype,
            "sharding": loop.sharding,
            "steps": loop.steps,
        },
        "targets": TARGETS,
        "calibration_s": round(calibration.seconds, 1),
        "kernel_launch_us": {
            "datasheet": spec.platform.hardware.kernel_launch_us,
            "calibrated": calibration.profile.kernel_launch_us,
        },
        "measured": {
            "step_s": round(step_s, 4),
            "peak_rss_growth_bytes": rss,
            "training_state_bytes": counted,
        },
    }
    plan = TrialPlan(recompute=loop.recompute, sharding=loop.sharding)
    for label, profile in (("datasheet", None), ("calibrated", calibration.profile)):
        p = PlannerMemoryEstimate(spec.platform.hardware, profile).predict(cfg, plan, loop, workers)
        out[label] = {
            "step_s": round(p.step_time_s, 4),
            "peak_bytes": round(p.peak_bytes),
            "step_time_error": _error(p.step_time_s, step_s),
            "memory_error_vs_training_state": _error(p.peak_bytes, counted),
            "memory_error_vs_rss_growth": _error(p.peak_bytes, rss),
        }
    cal = out["calibrated"]
    out["meets_targets"] = {
        "step_time": abs(cal["step_time_error"]) <= TARGETS["step_time"],
        "peak_memory": abs(cal["memory_error_vs_training_state"]) <= TARGETS["peak_memory"],
    }
    return out


def run() -> dict:
    import tempfile

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    data = prepare_data(None, 512)
    loop = _loop_config(data)
    with tempfile.TemporaryDirectory(prefix="day0-bench-trial-") as tmp:
        bare_before = bare_pytorch(loop, data.tokens)
        day0 = day0_ray(loop, data.tokens, f"file://{tmp}/ckpt")
        bare_after = bare_pytorch(loop, data.tokens)
        cost = cost_check(data, f"file://{tmp}/cost", f"file://{tmp}/store")
        rec = recovery(loop, data.tokens, f"file://{tmp}/kill")
    bare = {
        "tokens_per_s": (bare_before["tokens_per_s"] + bare_after["tokens_per_s"]) / 2,
        "final_loss": bare_after["final_loss"],
    }
    return {
        "config": {"steps": STEPS, "seq_len": SEQ, "batch": BATCH, **SCALE.model_dump()},
        "bare_tokens_per_s": round(bare["tokens_per_s"]),
        "day0_tokens_per_s": round(day0["tokens_per_s"]),
        "bare_tokens_per_s_before_after": [round(bare_before["tokens_per_s"]), round(bare_after["tokens_per_s"])],
        "ratio": round(day0["tokens_per_s"] / bare["tokens_per_s"], 3),
        "target_ratio": 0.9,
        "final_loss_bare": bare["final_loss"],
        "final_loss_day0": day0["final_loss"],
        "day0_wall_s": day0["wall_s"],
        "day0_startup_s": day0["startup_s"],
        "node_kill": rec,
        "cost_check": cost,
    }
