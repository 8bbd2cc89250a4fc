"""What one degree tuple fixes for the step-time terms: the achieved FLOP/s of each GEMM kind and the unit
communication times (`StepRates`), memoised per search.

Contract: `RateCache(costs, cluster, seq, compute, options).rates(d)` is pure and returns the same value
for the same degrees; every part is cached on the degrees it depends on (the GEMM rates on TP and the
tokens per rank, the all-to-all on the routed layout, the links on the group spans), so a search over
thousands of tuples computes each roofline once.
"""

from __future__ import annotations

from dataclasses import dataclass

from day0.planner import timing as tm
from day0.planner.inputs import ClusterFigures, PlannerOptions
from day0.planner.kernels import SEQUENTIAL_EXPERT_OPS, model_kernels, optimizer_tensors
from day0.planner.model import ModelCosts
from day0.planner.values import Degrees
from day0.spec.cluster import HardwareSpec

__all__ = ["BYTES", "RateCache", "StepRates", "gemm_peak_flops"]

BYTES = {"fp32": 4, "bf16": 2, "fp8": 1}


@dataclass(slots=True)  # built per degree tuple: a frozen init costs a setattr per field
class StepRates:
    """What one degree tuple fixes: achieved FLOP/s per GEMM kind and the unit communication times."""

    tokens: float  # tokens per rank per micro-batch, gathered over TP (s·b / CP)
    linear_flops: float  # dense GEMMs: peak of the compute dtype x roofline efficiency of the layer's shapes
    expert_flops: float  # routed-expert grouped GEMMs: rows = tokens per local expert
    attention_flops: float  # causal attention FLOPs per second (bf16; an unfused kernel computes all s² scores)
    head_flops: float  # output head GEMM FLOP/s: bf16 even in fp8 recipes (DeepSeek-V3 sec. 3.3.1)
    hbm: float  # bytes/s of memory-bound kernels
    tp_ring_s: float  # one TP all-gather or reduce-scatter of a layer's activations
    dispatch_s: float  # one MoE dispatch (all-to-all, or the all-gather dispatcher's all-gather) at the dispatch dtype
    combine_s: float  # one MoE combine (all-to-all, or reduce-scatter) at bf16
    cp_bandwidth: float  # bytes/s of the CP ring
    p2p_s: float  # pipeline sends/receives per micro-batch (forward + backward, every chunk)
    dp_bandwidth: float  # bytes/s of the dense parameters' data-parallel ring (DP x CP ranks, TP apart)
    expert_dp_bandwidth: float  # bytes/s of the routed experts' data-parallel ring (their replicas, EP x ETP apart)
    kernel_s: float  # host time per dispatched op (the platform's launch + dispatcher + autograd cost)
    layer_kernels: float  # ops of one layer's forward + backward (a dense layer's)
    moe_kernels: float  # what a MoE layer adds to them
    head_kernels_per_flop: float  # embedding, head and loss ops per unit of `StageWork.head_flops`
    optimizer_kernels: float  # one rank's clipping + optimizer ops per step
    optimizer_tensors: float  # the parameter tensors one rank's optimizer loops over
    launch_async: bool  # device kernels run behind the host (only dispatch beyond device time shows)
    collective_latency_s: float = 0.0  # fixed cost of one collective call (each CP ring step pays it)
    moe_permute_s: float = 0.0  # memory-bound time per MoE layer forward the dispatcher adds (all-gather's buffers)


def gemm_peak_flops(hardware: HardwareSpec, compute: str) -> float:
    """Dense GEMM peak FLOP/s: the platform's fp8 peak when training computes in fp8 and the platform
    states one, its bf16 peak otherwise."""
    if compute == "fp8" and hardware.fp8_tflops:
        return hardware.fp8_tflops * 1e12
    return hardware.figure("bf16_tflops") * 1e12


class RateCache:
    """`StepRates` per degree tuple, each part memoised on what it depends on (see the module contract)."""

    def __init__(self, costs: ModelCosts, cluster: ClusterFigures, seq: int, compute: str, options: PlannerOptions):
        c, o, hw = costs, options, cluster.hardware
        self.c, self.o, self.seq, self.per_node = costs, options, seq, cluster.per_node
        self.peak, self.frac = gemm_peak_flops(hw, compute), o.gemm_fraction(compute)
        self.wbytes = BYTES.get(compute, 2)
        self.hbm = o.hbm_bandwidth_gbps * 1e9
        self.measured, self.measured16 = o.gemm_points(compute), o.gemm_points("bf16")
        self.bf16, self.frac16 = hw.figure("bf16_tflops") * 1e12, o.gemm_fraction("bf16")
        if o.flash_attention:
            self.attention = self.bf16 * o.attention_efficiency
        else:  # batched QK^T and AV per head over the whole s x s square, then masked: twice the causal FLOPs
            bmm = [(seq, seq, c.head_dim), (seq, c.head_dim, seq)]
            eff = tm.gemm_efficiency(bmm, 2, self.bf16, self.frac16, self.hbm, self.measured16)
            self.attention = self.bf16 * eff / 2
        coll, self.lat = o.collective_efficiency, o.collective_latency_us * 1e-6
        intra, inter = hw.figure("intra_node_bandwidth_gbps"), hw.figure("inter_node_bandwidth_gbps")
        self.intra, self.inter = intra * coll, inter * coll
        self.kernel_s, self.launch_async = hw.figure("kernel_launch_us") * 1e-6, hw.launch_async
        kernels = model_kernels(c, compute)
        self.kernels, self.tensors = kernels, float(optimizer_tensors(c))
        self.head_kernels_per_flop = kernels.outside / c.head_flops_per_token
        self._gemm: dict[tuple, tuple[float, float, float]] = {}
        self._expert: dict[tuple, tuple[float, float, float, float]] = {}
        self._rates: dict[tuple, StepRates] = {}
        self.memo: dict[tuple, object] = {}  # what PlanContexts of one search share (their own keys)

    def _dense(self, tokens: float, tp: int) -> tuple[float, float, float]:
        """(linear FLOP/s, head FLOP/s, one TP ring) for `tokens` per rank split over `tp`."""
        key = (tokens, tp)
        if key not in self._gemm:
            c = self.c
            shapes = tm.layer_gemm_shapes(tokens, c.hidden, c.qkv_width, c.ffn, c.gated, tp)
            eff = tm.gemm_efficiency(shapes, self.wbytes, self.peak, self.frac, self.hbm, self.measured)
            head = tm.gemm_efficiency(
                [(tokens, c.vocab / tp, c.hidden)], 2, self.bf16, self.frac16, self.hbm, self.measured16
            )
            ring = tm.ring_seconds(tokens * c.hidden * 2, tp, self.intra * 1e9) + (self.lat if tp > 1 else 0.0)
            self._gemm[key] = (self.peak * eff, self.bf16 * head, ring)
        return self._gemm[key]

    def _routed(self, tok: float, ep: int, etp: int) -> tuple[float, float, float, float]:
        """(expert FLOP/s, dispatch, combine, permute memory time) for `tok` tokens per rank under the
        options' token dispatcher (all-to-all, or Megatron's all-gather: `timing.allgather_dispatch_seconds`)."""
        key = (tok, ep, etp)
        if key not in self._expert:
            c, o = self.c, self.o
            rows = tm.expert_rows(tok, c.top_k, ep, etp, c.num_experts)
            ex_shapes = tm.expert_gemm_shapes(rows, c.hidden, c.expert_ffn, etp)
            ex_eff = tm.gemm_efficiency(ex_shapes, self.wbytes, self.peak, self.frac, self.hbm, self.measured)
            lat = self.lat if ep > 1 else 0.0
            # dropless routing: the busiest EP rank holds `load` x the mean rows, and the step waits for it
            load = o.dropless_expert_load if o.moe_routing == "dropless" and ep > 1 else 1.0
            if o.moe_token_dispatcher == "allgather":  # Megatron's gathers bf16 hidden states (no fp8 dispatch)
                one = tm.allgather_dispatch_seconds(tok, c.hidden * 2, ep, etp, self.per_node, self.intra, self.inter)
                dispatch = combine = one + lat  # every peer's tokens whatever the routing: no load factor
                permute = tm.allgather_permute_bytes(tok, c.hidden * 2, ep) / self.hbm
            else:
                dispatch, combine = (
                    tm.expert_alltoall_seconds(
                        tok,
                        c.top_k,
                        c.hidden * b,
                        ep,
                        etp,
                        self.per_node,
                        self.intra,
                        self.inter,
                        o.expert_max_nodes,
                        load,
                        once_per_node=o.moe_token_dispatcher == "flex",
                    )
                    + lat
                    for b in (BYTES[o.comm.dispatch_dtype], 2)
                )
                permute = 0.0
            self._expert[key] = (self.peak * ex_eff / load, dispatch, combine, permute)
        return self._expert[key]

    def p2p_seconds(self, d: Degrees) -> float:
        """Pipeline sends and receives per micro-batch: each chunk's activations forward and their
        gradients back, over the link between stages (ranks TP x CP x DP apart)."""
        if d.pipeline_parallel == 1:
            return 0.0
        tok = self.seq * d.micro_batch / d.context_parallel / d.tensor_parallel
        span = d.tensor_parallel * d.context_parallel * d.data_parallel * 2
        bandwidth = tm.link_bandwidth(span, self.per_node, self.intra, self.inter)
        return 2 * d.virtual_pipeline_stages * tok * self.c.hidden * 2 / bandwidth

    def rates(self, d: Degrees) -> StepRates:
        tp, ep, etp, cp, pp, vpp = (
            d.tensor_parallel,
            d.expert_parallel,
            d.expert_tensor_parallel,
            d.context_parallel,
            d.pipeline_parallel,
            d.virtual_pipeline_stages,
        )
        key = (tp, ep, etp, cp, pp, vpp, d.data_parallel, d.micro_batch)
        hit = self._rates.get(key)
        if hit is not None:
            return hit
        n, intra, inter = self.per_node, self.intra, self.inter
        tokens = self.seq * d.micro_batch / cp
        tok = tokens / tp
        linear, head, ring = self._dense(tokens, tp)
        expert, dispatch, combine, permute = self._routed(tok, ep, etp)
        # without grouped GEMMs each of the rank's experts runs its MLP's ops in turn (`SEQUENTIAL_EXPERT_OPS`)
        sequential = 0.0 if self.o.moe_grouped_gemm else SEQUENTIAL_EXPERT_OPS * self.c.num_experts / ep
        p2p = self.p2p_seconds(d)
        k = self.kernels
        out = StepRates(
            tokens=tokens,
            head_flops=head,
            linear_flops=linear,
            expert_flops=expert,
            attention_flops=self.attention,
            hbm=self.hbm,
            tp_ring_s=ring,
            dispatch_s=dispatch,
            combine_s=combine,
            cp_bandwidth=tm.link_bandwidth(tp * cp, n, intra, inter),
            p2p_s=p2p,
            dp_bandwidth=tm.ring_bandwidth(d.dense_replicas, tp, n, intra, inter),
            expert_dp_bandwidth=tm.ring_bandwidth(d.expert_replicas, ep * etp, n, intra, inter),
            kernel_s=self.kernel_s,
            layer_kernels=k.dense_layer,
            moe_kernels=k.moe_extra + sequential,
            head_kernels_per_flop=self.head_kernels_per_flop,
            optimizer_kernels=k.optimizer / pp,
            optimizer_tensors=self.tensors / pp,
            launch_async=self.launch_async,
            collective_latency_s=self.lat,
            moe_permute_s=permute,
        )
        self._rates[key] = out
        return out
