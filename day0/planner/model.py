"""What the cost model needs from step 1's `ModelStructure`: per layer kind, parameters split by how
they shard, FLOPs per token, stored activation bytes per token by recompute granularity, and the
bytes its memory-bound (non-GEMM) kernels move.

Contract: `model_costs(structure, policy)` is pure and cheap; it reads only `ModelStructure` fields.
Activations follow Megatron's accounting (Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models", sec. 4.1: 34·s·b·h + 5·a·s²·b bytes per layer with dropout, split into
the sequence-parallel region (norms, dropout masks: 10·s·b·h) and the tensor-parallel one) tensor by
tensor, generalised to SwiGLU MLPs, GQA, MLA and routed experts (`_attention`, `_mlp`). Selective
recompute drops the tensors of the modules it recomputes (Megatron-Core `--recompute-modules`:
core_attn, layernorm, mla_up_proj, moe_act, plus mlp_act for dense MLP activations); FP8 activation
caching stores GEMM inputs at one byte (DeepSeek-V3 tech report sec. 3.3.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from day0.model.structure import LayerKind, ModelStructure


__all__ = ["ACT_BYTES", "SELECTIVE_MODULES", "ActivationPolicy", "KindCost", "ModelCosts", "Tensor", "model_costs"]

ACT_BYTES = 2  # activations are kept in 16-bit (bf16) unless FP8 caching applies
SELECTIVE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp_act")
Triple = tuple[float, float, float]  # (no recompute, selective, full)


@dataclass(frozen=True, slots=True)
class ActivationPolicy:
    """How activations are stored and exchanged: what selective recompute recomputes, whether the model trains
    with dropout (Megatron keeps 1-byte masks), whether GEMM inputs are cached in FP8, whether context
    parallelism exchanges K/V repeated to the query heads."""

    selective_modules: tuple[str, ...] = SELECTIVE_MODULES
    dropout: bool = False
    fp8_cache: bool = False
    fp8_compute: bool = False  # GEMMs in fp8: their inputs and output gradients pass through cast kernels
    cp_kv_repeated: bool = False


@dataclass(frozen=True, slots=True)
class Tensor:
    """One stored activation of a layer, per token: elements, bytes each, where it lives ("sp": the
    sequence-parallel region, "tp": split by TP, "expert": routed copies), the selective-recompute module
    that drops it (None: kept), and whether FP8 caching may store it at one byte."""

    elements: float
    region: str
    recomputed_by: str | None = None
    fp8_cacheable: bool = False
    nbytes: float = ACT_BYTES


@dataclass(frozen=True, slots=True)
class KindCost:
    """One decoder layer of a kind. Params are counts; activation and memory figures are bytes per token."""

    name: str
    is_moe: bool
    dense_params: float  # sharded by TP (attention, dense/shared MLP)
    replicated_params: float  # norms and router: replicated across TP
    expert_params: float  # routed experts: sharded by EP x expert-TP
    active_params: float  # parameters each token multiplies (2 FLOPs each, forward)
    routed_active_params: float  # of which routed-expert parameters (grouped GEMMs, rows = tokens per expert)
    attn_flops_per_seq: float  # forward attention FLOPs per token per unit of sequence length (causal)
    act_tp: Triple  # stored bytes/token split by TP, by recompute (none, selective, full)
    act_sp: Triple  # stored bytes/token of the sequence-parallel region (split by TP only with SP)
    act_expert: Triple  # routed token copies: split by TP/expert-TP
    act_scores_per_seq: Triple  # stored attention scores per token per unit of s (0 with FlashAttention)
    selective_flops: float  # forward FLOPs per token recomputed by selective recompute (besides core attention)
    cp_kv_bytes: float  # K and V bytes per token exchanged by context parallelism
    memory_bound_bytes: float  # forward bytes/token moved by norms, activations, residuals, routing, permutes
    selective_memory_bound_bytes: float  # of which selective recompute repeats (its norms and activations)
    scores_traffic_per_seq: float  # forward bytes/token/unit s of an unfused softmax (0 with FlashAttention)


@dataclass(frozen=True, slots=True)
class ModelCosts:
    name: str
    hidden: int
    heads: int
    num_layers: int
    vocab: int
    ffn: int  # dense MLP width
    qkv_width: float  # output width of the attention's input projections (Q, K, V or MLA's)
    head_dim: int
    expert_ffn: int  # routed expert width
    gated: bool  # SwiGLU-style MLP (three matrices) rather than two
    kinds: tuple[KindCost, ...]
    layer_kind: tuple[int, ...]  # index into kinds, per layer
    embedding_params: float
    head_params: float  # output head + final norm (tied heads add an embedding copy when PP > 1)
    tied: bool
    num_experts: int
    top_k: int
    params_total: int
    params_active: int
    output_heads: int = 1  # the model's head plus one per multi-token-prediction module

    @property
    def head_flops_per_token(self) -> float:
        return 2.0 * self.hidden * self.vocab * self.output_heads


def is_gated(s: ModelStructure) -> bool:
    """SwiGLU-style MLP: its dense MLP holds ~3·h·f weights per layer rather than 2·h·f (+ biases)."""
    f = s.intermediate_size or 4 * s.hidden_size
    dense = s.components.get("dense_mlp")
    dense_layers = s.num_layers - (s.moe.num_moe_layers if s.moe else 0)
    if dense is None or dense_layers == 0:
        return True  # MoE models with SwiGLU experts (every family in use)
    return dense.total / dense_layers > 2.5 * s.hidden_size * f


def _attention(s: ModelStructure, p: ActivationPolicy) -> tuple[list[Tensor], float, float, float]:
    """(stored tensors, attention FLOPs per token per unit s, selective FLOPs, CP K+V elements)."""
    h, a = s.hidden_size, s.num_attention_heads
    out: list[Tensor] = [Tensor(h, "sp"), Tensor(h, "sp", "layernorm")]  # norm input, norm output (QKV input)
    if s.mla is not None:  # DeepSeek-V2 sec. 2.1: latents, then per-head up-projections
        m = s.mla
        dqk, dv, q_rank = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim, m.q_lora_rank or 0
        out += [Tensor(q_rank + m.kv_lora_rank + m.qk_rope_head_dim, "tp")]  # latents
        out += [Tensor(q_rank + m.kv_lora_rank, "tp", "layernorm")]  # latent norm outputs
        up = a * (2 * dqk + dv)  # Q, K, V after up-projection (recomputed from latents: DeepSeek-V3 sec. 3.3.2)
        out += [Tensor(up, "tp", "mla_up_proj" if q_rank else None)]
        if not q_rank:
            out[-1] = Tensor(a * dqk, "tp")
            out += [Tensor(a * (dqk + dv), "tp", "mla_up_proj")]
        up_flops = 2.0 * (q_rank * a * dqk if q_rank else 0) + 2 * m.kv_lora_rank * a * (m.qk_nope_head_dim + dv)
        attn = cp = float(a * (dqk + dv))
    else:
        d, kv = s.head_dim, s.num_kv_heads
        out += [Tensor(a * d + 2 * kv * d, "tp")]  # Q, K, V
        up_flops, attn, cp = 0.0, float(a * 2 * d), float(2 * (a if p.cp_kv_repeated else kv) * d)
    dv_total = a * (s.mla.v_head_dim if s.mla else s.head_dim)
    out += [Tensor(dv_total, "tp", None, True)]  # attention output = output-projection input
    out += [Tensor(4 * a / ACT_BYTES, "tp")]  # fp32 softmax statistics (FlashAttention's log-sum-exp)
    if p.dropout:
        out += [Tensor(h, "sp", None, False, 1)]  # dropout mask after the output projection
    return out, attn, up_flops, cp


def _mlp(s: ModelStructure, kind: LayerKind, gated: bool, p: ActivationPolicy) -> list[Tensor]:
    h = s.hidden_size
    out = [Tensor(h, "sp"), Tensor(h, "sp", "layernorm")]  # norm input (residual), norm output (MLP input)
    if p.dropout:
        out += [Tensor(h, "sp", None, False, 1)]
    if not kind.is_moe or s.moe is None:
        f = s.intermediate_size or 4 * h
        inner = 2 * f if gated else f  # gate and up, or fc1's output (the activation's input)
        return [*out, Tensor(inner, "tp", None, True), Tensor(f, "tp", "mlp_act")]
    moe = s.moe
    fe, k, fs = moe.expert_intermediate_size, moe.top_k, moe.num_shared_experts * moe.expert_intermediate_size
    return [
        *out,
        Tensor(2 * moe.num_experts, "tp"),  # fp32 router logits, counted in 16-bit elements
        Tensor(2 * fs, "tp", None, True),  # shared gate, up
        Tensor(fs, "tp", "moe_act"),
        Tensor(2 * k * fe, "tp", None, True),  # routed gate, up (SwiGLU inputs: FP8-cached by DeepSeek-V3)
        Tensor(k * fe, "tp", "moe_act"),
        Tensor(k * h, "expert", None, True),  # dispatched token copies (expert up-projection input)
    ]  # router weights scale the SwiGLU output inside the expert (Megatron-Core's weighted_bias_swiglu), so
    # the combine is a plain sum and the expert outputs need not be kept


def _bytes(t: Tensor, p: ActivationPolicy) -> float:
    return t.elements * (1 if p.fp8_cache and t.fp8_cacheable else t.nbytes)


def stored(tensors: list[Tensor], p: ActivationPolicy, region: str) -> Triple:
    """Stored bytes/token of one region by recompute: all tensors; those no selective module drops; for
    full recompute only the layer input (the first sequence-parallel tensor, 2·s·b·h)."""
    ts = [t for t in tensors if t.region == region]
    none = sum(_bytes(t, p) for t in ts)
    sel = sum(_bytes(t, p) for t in ts if t.recomputed_by not in p.selective_modules)
    full = ACT_BYTES * tensors[0].elements if region == "sp" else 0.0
    return none, sel, full


def memory_bound_bytes(s: ModelStructure, kind: LayerKind, gated: bool, p: ActivationPolicy) -> float:
    """Forward bytes/token of a layer's non-GEMM kernels, each read + write at 2 bytes: two norms (2h each),
    two residual adds (3h each), rotary on Q and K, the MLP activation (gated: read 2f write f; else f, f),
    dropout (read, write, 1-byte mask); MoE: router softmax/top-k over E logits, token permutation and
    unpermutation (k·h copies read and written each way) and the weighted combine (k·h read, h written)
    (the kernel list of Megatron-Core's MoE layer: router, token dispatcher permute/unpermute)."""
    h = s.hidden_size
    b = ACT_BYTES
    norms, residual = 2 * 2 * h * b, 2 * 3 * h * b
    qk = s.num_attention_heads * s.head_dim + s.num_kv_heads * s.head_dim
    rope = 2 * qk * b
    drop = 2 * (2 * h * b + h) if p.dropout else 0.0
    if kind.is_moe and s.moe is not None:
        moe = s.moe
        k, fe, fs = moe.top_k, moe.expert_intermediate_size, moe.num_shared_experts * moe.expert_intermediate_size
        act = 3 * (k * fe + fs) * b
        routing = 3 * 4 * moe.num_experts + 2 * (2 * k * h * b) + (k * h + h) * b
        return norms + residual + rope + drop + act + routing
    f = s.intermediate_size or 4 * h
    act = (3 * f if gated else 2 * f) * b
    return norms + residual + rope + drop + act


def fp8_cast_bytes(s: ModelStructure, kind: LayerKind, gated: bool, qkv_width: float) -> float:
    """Forward bytes/token of FP8 cast kernels: each GEMM's input (and, backward, its output gradient:
    the 3x of the stage time covers it) read in bf16 and written in fp8, 3 bytes per element (Transformer
    Engine / DeepSeek-V3 sec. 3.3: tile-wise quantisation before every FP8 GEMM)."""
    h = s.hidden_size
    dv = s.num_attention_heads * (s.mla.v_head_dim if s.mla else s.head_dim)
    attn = (h + dv) + (qkv_width + h)  # QKV and output projection: inputs, then outputs
    if kind.is_moe and s.moe is not None:
        m = s.moe
        fe, k, fs = m.expert_intermediate_size, m.top_k, m.num_shared_experts * m.expert_intermediate_size
        mlp = (k * h + k * fe + h + fs) + (2 * k * fe + k * h + 2 * fs + h)
    else:
        f = s.intermediate_size or 4 * h
        mlp = (h + f) + ((2 if gated else 1) * f + h)
    return 3.0 * (attn + mlp)


def selective_memory_bound_bytes(s: ModelStructure, kind: LayerKind, gated: bool, p: ActivationPolicy) -> float:
    """Forward bytes/token of the memory-bound kernels selective recompute runs again: the two norms
    (read h, write h) with `layernorm`, the MLP activation with `mlp_act` / `moe_act`."""
    h, b, mods = s.hidden_size, ACT_BYTES, p.selective_modules
    out = 2 * 2 * h * b if "layernorm" in mods else 0.0
    if kind.is_moe and s.moe is not None:
        m = s.moe
        out += 3 * (m.top_k + m.num_shared_experts) * m.expert_intermediate_size * b if "moe_act" in mods else 0.0
    elif "mlp_act" in mods:
        f = s.intermediate_size or 4 * h
        out += (3 * f if gated else 2 * f) * b
    return out


def _kind_cost(s: ModelStructure, kind: LayerKind, gated: bool, p: ActivationPolicy) -> KindCost:
    comps = s.components
    moe_layers = s.moe.num_moe_layers if s.moe else 0
    norms = (comps["norms"].total - s.hidden_size) / s.num_layers if "norms" in comps else 0.0
    expert = comps["routed_experts"].total / moe_layers if kind.is_moe and "routed_experts" in comps else 0.0
    router = comps["router"].total / moe_layers if kind.is_moe and "router" in comps else 0.0
    attn_tensors, attn_coeff, sel_flops, cp_kv = _attention(s, p)
    tensors = attn_tensors + _mlp(s, kind, gated, p)
    a = s.num_attention_heads
    scores = ACT_BYTES * a + (ACT_BYTES * a + a if p.dropout else 0.0)  # softmax out (+ dropout out, mask)
    sel_scores = 0.0 if "core_attn" in p.selective_modules else scores
    return KindCost(
        name=kind.name,
        is_moe=kind.is_moe,
        dense_params=kind.params_total - expert - router - norms,
        replicated_params=router + norms,
        expert_params=expert,
        active_params=kind.params_active,
        routed_active_params=expert * s.moe.top_k / s.moe.num_experts if expert and s.moe else 0.0,
        attn_flops_per_seq=attn_coeff,  # 2 FLOPs x (QK^T + AV) x 1/2 causal
        act_tp=stored(tensors, p, "tp"),
        act_sp=stored(tensors, p, "sp"),
        act_expert=stored(tensors, p, "expert"),
        act_scores_per_seq=(scores, sel_scores, 0.0),
        selective_flops=sel_flops if "mla_up_proj" in p.selective_modules else 0.0,
        cp_kv_bytes=ACT_BYTES * cp_kv,
        memory_bound_bytes=memory_bound_bytes(s, kind, gated, p)
        + (fp8_cast_bytes(s, kind, gated, _qkv_width(s)) if p.fp8_compute else 0.0),
        selective_memory_bound_bytes=selective_memory_bound_bytes(s, kind, gated, p),
        scores_traffic_per_seq=a * ACT_BYTES * (4 + (3 if p.dropout else 0)),  # softmax r+w x2 (+ dropout)
    )


def _qkv_width(s: ModelStructure) -> float:
    """Attention parameters per layer over h, less the h x h output projection: the QKV output width."""
    attn = s.components.get("attention")
    if attn is None or attn.total == 0:
        return 3.0 * s.hidden_size
    return max(float(s.hidden_size), attn.total / s.num_layers / s.hidden_size - s.hidden_size)


def model_costs(s: ModelStructure, policy: ActivationPolicy | None = None, mtp_layers: int = 0) -> ModelCosts:
    """The costs of `s`; `mtp_layers` multi-token-prediction modules (DeepSeek-V3 sec. 2.2) each add one
    layer of the last layer's kind and an output-head pass on the last stage (embedding and head shared)."""
    policy = policy or ActivationPolicy()
    gated = is_gated(s)
    kinds = tuple(_kind_cost(s, k, gated, policy) for k in s.layer_kinds)
    index = {k.name: i for i, k in enumerate(s.layer_kinds)}
    comps = s.components
    emb = comps["embeddings"].total if "embeddings" in comps else s.vocab_size * s.hidden_size
    head = comps["head"].total if "head" in comps and not s.tie_word_embeddings else 0
    return ModelCosts(
        name=s.model,
        hidden=s.hidden_size,
        heads=s.num_attention_heads,
        num_layers=s.num_layers + mtp_layers,
        vocab=s.vocab_size,
        ffn=s.intermediate_size or 4 * s.hidden_size,
        qkv_width=_qkv_width(s),
        head_dim=s.head_dim,
        expert_ffn=s.moe.expert_intermediate_size if s.moe else 0,
        gated=gated,
        kinds=kinds,
        layer_kind=tuple(index[n] for n in s.layer_kind_of + s.layer_kind_of[-1:] * mtp_layers),
        embedding_params=emb,
        head_params=head + s.hidden_size,
        tied=s.tie_word_embeddings,
        num_experts=s.moe.num_experts if s.moe else 0,
        top_k=s.moe.top_k if s.moe else 0,
        params_total=s.params_total,
        params_active=s.params_active,
        output_heads=1 + mtp_layers,
    )
