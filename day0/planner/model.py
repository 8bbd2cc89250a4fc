"""What the cost model needs from step 1's `ModelStructure`: per layer kind, parameters split by how
they shard, FLOPs per token, and stored activation bytes per token by recompute granularity.

Contract: `model_costs(structure)` is pure and cheap; it reads only `ModelStructure` fields. Activation
sizes generalise Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sec. 4.1: 34·s·b·h + 5·a·s²·b bytes per layer) tensor by tensor to SwiGLU MLPs, GQA, MLA
and routed experts, without dropout masks (modern LLMs train without dropout).
"""

from __future__ import annotations

from dataclasses import dataclass

from day0.analysis.results import LayerKind, ModelStructure

__all__ = ["ACT_BYTES", "KindCost", "ModelCosts", "model_costs"]

ACT_BYTES = 2  # activations are kept in 16-bit (bf16) even when GEMMs run in fp8


@dataclass(frozen=True, slots=True)
class KindCost:
    """One decoder layer of a kind. Params are counts; activation figures are bytes per token."""

    name: str
    is_moe: bool
    dense_params: float  # sharded by TP (attention, dense/shared MLP)
    replicated_params: float  # norms and router: replicated across TP
    expert_params: float  # routed experts: sharded by EP x expert-TP
    active_params: float  # parameters each token multiplies (2 FLOPs each, forward)
    routed_active_params: float  # of which routed-expert parameters (grouped GEMMs, rows = tokens per expert)
    attn_flops_per_seq: float  # forward attention FLOPs per token per unit of sequence length (causal)
    act_none: float  # stored bytes/token without recompute (split by TP/SP)
    act_selective: float  # ... with selective recompute
    act_expert_none: float  # routed token copies (k x h): split by TP/expert-TP
    act_expert_selective: float
    act_scores_per_seq: float  # stored attention scores per token per unit of s (0 with FlashAttention)
    selective_flops: float  # forward FLOPs per token recomputed by selective recompute
    layer_input: float  # bytes/token kept by full recompute (the layer input)
    cp_kv_bytes: float  # K and V bytes per token exchanged by context parallelism


@dataclass(frozen=True, slots=True)
class ModelCosts:
    name: str
    hidden: int
    heads: int
    num_layers: int
    vocab: int
    kinds: tuple[KindCost, ...]
    layer_kind: tuple[int, ...]  # index into kinds, per layer
    embedding_params: float
    head_params: float  # output head + final norm (tied heads add an embedding copy when PP > 1)
    tied: bool
    num_experts: int
    top_k: int
    params_total: int
    params_active: int

    @property
    def head_flops_per_token(self) -> float:
        return 2.0 * self.hidden * self.vocab


def _attention(s: ModelStructure) -> tuple[float, float, float, float, float]:
    """(stored elements/token, of which selective recomputes, attn flops per seq, selective flops, CP K+V elements)."""
    h, a = s.hidden_size, s.num_attention_heads
    if s.mla is not None:  # DeepSeek-V2 sec. 2.1: latents, then per-head up-projections
        m = s.mla
        dqk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        q_rank = m.q_lora_rank or 0
        latents = 2 * q_rank + 2 * m.kv_lora_rank + m.qk_rope_head_dim  # q/kv latents and their norm outputs
        up = a * (2 * dqk + dv)  # Q, K, V after up-projection (recomputed from latents: DeepSeek-V3 sec. 3.3.2)
        stored = h + h + latents + up + a * dv  # norm in, norm out, ..., attention output
        sel = h + q_rank + m.kv_lora_rank + (up if q_rank else a * (dqk + dv))
        up_flops = (
            2 * (q_rank * a * dqk + m.kv_lora_rank * a * (m.qk_nope_head_dim + dv))
            if q_rank
            else 2 * m.kv_lora_rank * a * (m.qk_nope_head_dim + dv)
        )
        return stored, sel, a * (dqk + dv), up_flops, a * (dqk + dv)
    d, kv = s.head_dim, s.num_kv_heads
    stored = h + h + a * d + 2 * kv * d + a * d  # norm in, QKV input, Q, K, V, attention output
    return stored, h, a * 2 * d, 0.0, 2 * kv * d


def _mlp(s: ModelStructure, kind: LayerKind) -> tuple[float, float, float, float]:
    """(stored elements/token, selective part, expert token-copy elements, selective part of those)."""
    h = s.hidden_size
    if not kind.is_moe or s.moe is None:
        f = s.intermediate_size or 4 * h
        return h + h + 3 * f, h + f, 0.0, 0.0  # norm in/out, gate, up, act(gate)*up; act recomputable
    moe = s.moe
    fe, k, fs = moe.expert_intermediate_size, moe.top_k, moe.num_shared_experts * moe.expert_intermediate_size
    router = 2 * moe.num_experts  # fp32 logits, counted in 16-bit elements
    stored = h + h + router + 3 * fs + 3 * k * fe  # norm in/out, router, shared gate/up/act, routed gate/up/act
    sel = h + fs + k * fe
    return stored, sel, 2 * k * h, 0.0  # dispatched inputs and expert outputs (kept for the combine)


def _kind_cost(s: ModelStructure, kind: LayerKind) -> KindCost:
    comps = s.components
    moe_layers = s.moe.num_moe_layers if s.moe else 0
    norms = (comps["norms"].total - s.hidden_size) / s.num_layers if "norms" in comps else 0.0
    expert = comps["routed_experts"].total / moe_layers if kind.is_moe and "routed_experts" in comps else 0.0
    router = comps["router"].total / moe_layers if kind.is_moe and "router" in comps else 0.0
    a_stored, a_sel, attn_coeff, sel_flops, cp_kv = _attention(s)
    m_stored, m_sel, ex_stored, ex_sel = _mlp(s, kind)
    return KindCost(
        name=kind.name,
        is_moe=kind.is_moe,
        dense_params=kind.params_total - expert - router - norms,
        replicated_params=router + norms,
        expert_params=expert,
        active_params=kind.params_active,
        routed_active_params=expert * s.moe.top_k / s.moe.num_experts if expert and s.moe else 0.0,
        attn_flops_per_seq=attn_coeff,  # 2 FLOPs x (QK^T + AV) x 1/2 causal
        act_none=ACT_BYTES * (a_stored + m_stored) + 4 * s.num_attention_heads,  # + fp32 softmax stats
        act_selective=ACT_BYTES * (a_stored + m_stored - a_sel - m_sel) + 4 * s.num_attention_heads,
        act_expert_none=ACT_BYTES * ex_stored,
        act_expert_selective=ACT_BYTES * (ex_stored - ex_sel),
        act_scores_per_seq=ACT_BYTES * s.num_attention_heads,
        selective_flops=sel_flops,
        layer_input=ACT_BYTES * s.hidden_size,
        cp_kv_bytes=ACT_BYTES * cp_kv,
    )


def model_costs(s: ModelStructure) -> ModelCosts:
    kinds = tuple(_kind_cost(s, k) for k in s.layer_kinds)
    index = {k.name: i for i, k in enumerate(s.layer_kinds)}
    comps = s.components
    emb = comps["embeddings"].total if "embeddings" in comps else s.vocab_size * s.hidden_size
    head = comps["head"].total if "head" in comps and not s.tie_word_embeddings else 0
    return ModelCosts(
        name=s.model,
        hidden=s.hidden_size,
        heads=s.num_attention_heads,
        num_layers=s.num_layers,
        vocab=s.vocab_size,
        kinds=kinds,
        layer_kind=tuple(index[n] for n in s.layer_kind_of),
        embedding_params=emb,
        head_params=head + s.hidden_size,
        tied=s.tie_word_embeddings,
        num_experts=s.moe.num_experts if s.moe else 0,
        top_k=s.moe.top_k if s.moe else 0,
        params_total=s.params_total,
        params_active=s.params_active,
    )
