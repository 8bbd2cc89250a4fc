"""Why pinned degrees admit no parallel layout, with the numbers: what `day0 plan` says of a fully (or
partly) pinned spec when no degree tuple is left to evaluate.

Contract: pure. `pinned_layout_reasons(costs, cluster, training, constraints, options)` checks each
structural rule the search applies (`space.enumerate_degrees`) on the values the constraints fix, and
returns one line per rule they break, naming the values; rules on values the search was free to choose
are not reported (the search's rejected counts cover those).
"""

from __future__ import annotations

from day0.planner.inputs import ClusterFigures, PlannerOptions
from day0.planner.model import ModelCosts
from day0.spec.pipeline import TrainingSpec
from day0.steps.parallel.config import ParallelConstraints

__all__ = ["pinned_layout_reasons"]


def pinned_layout_reasons(
    costs: ModelCosts,
    cluster: ClusterFigures,
    training: TrainingSpec,
    c: ParallelConstraints,
    options: PlannerOptions,
) -> list[str]:
    n = c.accelerators or cluster.accelerators
    tp, pp, cp, dp = c.tensor_parallel, c.pipeline_parallel, c.context_parallel, c.data_parallel
    ep, etp, vpp, mb = c.expert_parallel, c.expert_tensor_parallel, c.virtual_pipeline_stages, c.micro_batch
    out = []
    if n > cluster.accelerators:
        out.append(f"{n} accelerators requested, the cluster has {cluster.accelerators}")
    if tp is not None and pp is not None and cp is not None and dp is not None and tp * pp * cp * dp != n:
        out.append(f"TP {tp} x PP {pp} x CP {cp} x DP {dp} = {tp * pp * cp * dp} accelerators, not {n}")
    if tp is not None:
        if tp > cluster.per_node:
            out.append(f"TP {tp} exceeds one node ({cluster.per_node} accelerators)")
        if costs.heads % tp:
            out.append(f"TP {tp} does not divide the {costs.heads} attention heads")
    if cp is not None and cp > 1 and training.seq_len % (2 * cp):
        out.append(f"CP {cp} needs the sequence ({training.seq_len}) a multiple of 2 x CP = {2 * cp}")
    if pp is not None and pp > costs.num_layers:
        out.append(f"PP {pp} exceeds the {costs.num_layers} layers")
    if dp is not None and mb is not None and training.global_batch % (dp * mb):
        out.append(
            f"the global batch {training.global_batch} is not a multiple of DP {dp} x micro-batch {mb} = {dp * mb}"
        )
    if ep is not None and ep > 1:
        if not costs.num_experts or costs.num_experts % ep:
            out.append(f"EP {ep} does not divide the {costs.num_experts} experts")
        if tp is not None and cp is not None and dp is not None and (tp * cp * dp) % (ep * (etp or 1)):
            out.append(f"EP {ep} x expert-TP {etp or 1} does not divide DP x CP x TP = {tp * cp * dp}")
    if etp is not None and tp is not None and etp not in (1, tp):
        out.append(f"expert-TP {etp} is neither 1 nor TP {tp}")
    if vpp is not None and vpp > 1 and pp is not None:
        if pp * vpp > costs.num_layers:
            out.append(f"PP {pp} x VPP {vpp} = {pp * vpp} chunks for {costs.num_layers} layers")
        if dp is not None and mb is not None and training.global_batch % (dp * mb) == 0:
            m = training.global_batch // (dp * mb)
            if m % pp:
                out.append(f"interleaving needs the {m} micro-batches per step a multiple of PP {pp}")
    if options.dualpipe and "dualpipe" in options.pinned and pp is not None and pp % 2:
        out.append(f"DualPipe needs an even PP, not {pp}")
    return out
