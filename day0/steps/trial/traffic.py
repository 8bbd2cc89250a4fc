"""Bytes the trial's eager ops move in one forward + backward: what its memory-bound time is made of.

Fused kernels (Megatron, what step 3 plans for) read and write each activation a few times per layer;
Hugging Face modules run eagerly, so every norm, rotary embedding, routing step, cast and gradient op
is a pass of its own over its operands. On the trial model that is about 20x the fused accounting (154
MB against 7 MB per step on the default pipeline's model).

The count runs the trial's own step (`day0.core.training.forward_loss` under autocast, fp32 weights,
then backward) once on the host under a `TorchDispatchMode`, summing the bytes of every op's tensor
inputs and outputs. It leaves out views (no data moves) and GEMMs (timed by the calibrated GEMM rates,
whose figure already includes their operand traffic). Weights and activations are real (a meta tensor
has no autocast), on a copy that keeps the first layer of each kind and none after (the rest repeat
them): bytes per layer kind, scaled by the trial's count of each kind, plus the embedding, head and
loss once.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from day0.core.dtypes import DTYPES
from day0.core.scopes import module_scopes
from day0.core.training import forward_loss
from day0.core.typing import HFConfigDict
from day0.steps.trial.model import build_trial_model

__all__ = ["eager_traffic_bytes"]

_GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "_grouped_mm"})


def _moves_data(func: torch._ops.OpOverload) -> bool:
    """Not a view: some output is new memory or written in place (views alias without writing)."""
    returns = func._schema.returns
    return not returns or any(r.alias_info is None or r.alias_info.is_write for r in returns)


class _ByteCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.scope = "outside"
        self.bytes: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.overloadpacket.__name__ not in _GEMM_OPS and _moves_data(func):
            tensors = [t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
            self.bytes[self.scope] += sum(t.numel() * t.element_size() for t in tensors)
        return out


def eager_traffic_bytes(
    config: HFConfigDict, kinds: list[str], micro_batch: int, seq_len: int, compute_dtype: str
) -> float:
    """Bytes the non-GEMM, non-view ops of one trial forward + backward move on one worker (see the
    module docstring); `kinds` names each decoder layer's kind (`ModelStructure.layer_kind_of`)."""
    first = {k: kinds.index(k) for k in dict.fromkeys(kinds)}
    depth = max(first.values()) + 1
    reduced = dict(config, num_hidden_layers=depth)
    if config.get("layer_types"):
        reduced["layer_types"] = config["layer_types"][:depth]
    model = build_trial_model(reduced, seed=0).train()
    vocab = int(config["vocab_size"])  # random tokens: routing spreads them over the experts as text does
    ids = torch.randint(0, vocab, (micro_batch, seq_len + 1), generator=torch.Generator().manual_seed(0))
    dtype = DTYPES[compute_dtype]
    forward_loss(model, ids, dtype).backward()  # gradients exist from here on, as in every later step
    counter = _ByteCounter()
    with module_scopes(model, counter, [(i, kinds[i]) for i in range(depth)]), counter:
        forward_loss(model, ids, dtype).backward()
    layers = sum(counter.bytes[f"layers.{first[k]} ({k})"] for k in kinds)
    return float(layers + sum(v for s, v in counter.bytes.items() if not s.startswith("layers.")))
