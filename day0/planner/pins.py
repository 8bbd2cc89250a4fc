"""The knobs a spec pins, as the planner's search space: `parallel:`'s knobs (and a written
`training.micro_batch`) narrowed to one value each, the rest left to the search.

Contract: pure over the spec. `pin_options(spec, options)` returns the options with each pinned knob's
list reduced to its value and `pinned` naming the spec field behind each (step 4 never changes those);
`constraints_for(spec)` is the `ParallelConstraints` the search honours (None: nothing pinned).
"""

from __future__ import annotations

from typing import Any

from day0.planner.inputs import PlannerOptions
from day0.spec.pipeline import PipelineSpec
from day0.steps.parallel.config import ParallelConstraints

__all__ = ["constraints_for", "pin_options", "pinned_micro_batch"]


def pinned_micro_batch(spec: PipelineSpec) -> tuple[int, str] | None:
    """(micro-batch, the field that pins it): `parallel.micro_batch`, else a written `training.micro_batch`."""
    p = spec.parallel
    if p != "auto" and p.micro_batch is not None:
        return p.micro_batch, "parallel.micro_batch"
    if "micro_batch" in spec.training.model_fields_set:
        return spec.training.micro_batch, "training.micro_batch"
    return None


def constraints_for(spec: PipelineSpec) -> ParallelConstraints | None:
    """The degrees and micro-batch the search honours."""
    mb = pinned_micro_batch(spec)
    base = spec.parallel if spec.parallel != "auto" else None
    if mb is None:
        return base
    return (base or ParallelConstraints()).model_copy(update={"micro_batch": mb[0]})


def pin_options(spec: PipelineSpec, options: PlannerOptions) -> PlannerOptions:
    """`options` with every knob the spec pins reduced to its value (see the module contract)."""
    update: dict[str, Any] = {}
    pinned: dict[str, str] = {}
    mb = pinned_micro_batch(spec)
    if mb is not None:
        update["micro_batches"], pinned["micro_batch"] = [mb[0]], mb[1]
    p = spec.parallel
    if p == "auto":
        return options.model_copy(update={**update, "pinned": pinned})
    f = "parallel."
    for name in ("expert_tensor_parallel", "virtual_pipeline_stages"):
        if getattr(p, name) is not None:
            pinned[name] = f + name
    rc = p.recompute_pin()
    if rc is not None:
        update["recompute"], pinned["recompute"] = [rc.granularity], f + "recompute"
        if rc.modules is not None:
            update["selective_modules"] = list(rc.modules)
        if rc.method is not None:
            update["recompute_method"] = rc.method
        if rc.num_layers is not None:
            update["recompute_num_layers"] = rc.num_layers
    if p.zero_stage is not None:
        update["zero_stages"], pinned["zero_stage"] = [p.zero_stage], f + "zero_stage"
    elif p.distributed_optimizer is not None:
        stages = [1] if p.distributed_optimizer else [z for z in options.zero_stages if z != 1]
        update["zero_stages"], pinned["zero_stage"] = stages, f + "distributed_optimizer"
    if p.offload is not None:
        update["offload"], pinned["offload"] = [p.offload], f + "offload"
    for name in ("sequence_parallel", "dualpipe"):
        if getattr(p, name) is not None:
            update[name], pinned[name] = getattr(p, name), f + name
    comm: dict[str, Any] = {}
    for k in ("tp", "ep", "dp"):
        value = getattr(p.overlap, k)
        if value is not None:
            comm[f"{k}_overlap"], pinned[f"{k}_overlap"] = value, f"{f}overlap.{k}"
    if p.grad_reduce_dtype is not None:
        comm["grad_reduce_dtype"], pinned["grad_reduce_dtype"] = p.grad_reduce_dtype, f + "grad_reduce_dtype"
    if p.fp8 is not None:
        update["fp8_recipe"], update["fp8_format"] = p.fp8.recipe, p.fp8.format
        pinned["fp8_recipe"] = f + "fp8"
        if p.fp8.activation_cache is not None:
            update["fp8_activation_cache"] = p.fp8.activation_cache
            pinned["fp8_activation_cache"] = f + "fp8.activation_cache"
        if p.fp8.dispatch is not None:
            comm["dispatch_dtype"] = "fp8" if p.fp8.dispatch else "bf16"
            pinned["dispatch_dtype"] = f + "fp8.dispatch"
    if comm:
        update["comm"] = options.comm.model_copy(update=comm)
    return options.model_copy(update={**update, "pinned": pinned})
