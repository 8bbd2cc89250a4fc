"""The fault matrix's trainings: `day0.steps.trial.loop.run_steps` (the body of the Ray Train worker
function) on a tiny scaled DeepSeek-V3-family model for `STEPS` steps, in this process for one
worker, in spawned gloo processes for two (faults that live in the gradient all-reduce)."""

from __future__ import annotations

import os
import queue
from functools import cache
from typing import Any

import torch

from day0.core.ports import free_port
from day0.steps.trial.config import TrialScale
from day0.steps.trial.faults import TrialFaults
from day0.steps.trial.loop import LoopConfig, LoopStep
from testsupport.fault_matrix.catalogue import Fault
from testsupport.fault_matrix.plugins import plugin_platform_spec

__all__ = ["STEPS", "WARMUP", "candidate_config", "loop_config", "train"]

STEPS, WARMUP = 30, 8


@cache
def _tokens() -> torch.Tensor:
    from day0.steps.trial.data import prepare_data
    from day0.steps.trial.train import TRIAL_VOCAB

    return torch.as_tensor(prepare_data(None, TRIAL_VOCAB).tokens)


@cache
def _model_config() -> dict[str, Any]:
    from day0.model.source import resolve_model_source
    from day0.steps.trial.data import prepare_data
    from day0.steps.trial.model import scale_config
    from day0.steps.trial.train import TRIAL_VOCAB

    data = prepare_data(None, TRIAL_VOCAB)
    return scale_config(
        resolve_model_source("tiny-deepseek-v3").config,
        TrialScale(layers=2, hidden=64, experts=4),
        vocab_size=data.vocab_size,
        seq_len=32,
        eos_token_id=data.eos_token_id,
    )


def loop_config(seed: int, **update: Any) -> LoopConfig:
    """The loop of seed `seed` (fp32, stock kernels: the reference), with `update` applied."""
    fields: dict[str, Any] = {
        "model_config_dict": _model_config(),
        "seed": seed,
        "steps": STEPS,
        "global_batch": 4,
        "micro_batch": 4,
        "seq_len": 32,
        "learning_rate": 3e-3,
        "lr_warmup_steps": 2,
        "checkpoint_every": STEPS,
    }
    return LoopConfig(**(fields | update))


def candidate_config(seed: int, fault: Fault | None = None, kernel: str | None = None) -> LoopConfig:
    """The candidate: bf16 autocast, under the platform made of plugin `kernel` (or the fault's)."""
    name = kernel or (fault.name if fault and fault.kernel else None)
    return loop_config(seed, compute_dtype="bf16", platform=plugin_platform_spec(name))


def _rank(rank: int, world: int, port: int, cfg: dict[str, Any], hooks: TrialFaults | None, out: Any) -> None:
    """One spawned gloo rank of a 2-worker run (what a Ray Train worker does, without Ray)."""
    import torch.distributed as dist

    from day0.steps.trial.loop import run_steps

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        history = run_steps(
            LoopConfig.model_validate(cfg), _tokens(), rank=rank, world=world, distributed=True, hooks=hooks
        )
        if rank == 0:
            out.put(history)
    finally:
        dist.destroy_process_group()


def train(cfg: LoopConfig, workers: int = 1, hooks: TrialFaults | None = None) -> list[LoopStep]:
    """The loop on `workers` ranks: in this process for one, spawned gloo processes for two."""
    from day0.steps.trial.loop import run_steps

    if workers == 1:
        return [LoopStep.model_validate(h) for h in run_steps(cfg, _tokens(), hooks=hooks)]
    ctx = torch.multiprocessing.get_context("spawn")
    out, port = ctx.Queue(), free_port()
    cfg = cfg.model_copy(update={"micro_batch": cfg.global_batch // workers})
    procs = [ctx.Process(target=_rank, args=(r, workers, port, cfg.model_dump(), hooks, out)) for r in range(workers)]
    for p in procs:
        p.start()
    history = None
    while history is None:
        try:
            history = out.get(timeout=1)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                for p in procs:
                    p.kill()
                codes = [p.exitcode for p in procs]
                raise RuntimeError(f"a rank of the {workers}-worker run died: exit codes {codes}") from None
    for p in procs:
        p.join(timeout=60)
    return [LoopStep.model_validate(h) for h in history]
