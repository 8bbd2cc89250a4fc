"""Operator inventory: every aten operator one training step runs (forward, loss, backward, then
gradient clipping and the AdamW update), captured with a `TorchDispatchMode` on a reduced-depth copy
of the model (same widths, one layer of each distinct kind) under meta tensors, so a 671B model's
inventory costs no memory. The loss and the optimizer step are step 5's own (`day0.core.training`),
run on fp32 master copies of the parameters as the trial's optimizer runs; each op records its
phases ('forward', 'backward', 'optimizer'). Host-side optimizer bookkeeping (the step counters live
on the CPU whatever the device) and profiler markers are not device kernels and are not recorded.

Contract: `capture_operators(model, ...)` never crashes on a kernel's dtype restriction: it records
the constraint (e.g. `aten::_grouped_mm` accepts only bf16), runs that call at bf16 so capture can go
on, and reports it in `OpInventory.constraints`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from day0.core.dtypes import DTYPES, dtype_name
from day0.core.ops import DtypeConstraint, Example, OpInventory, OpRecord, describe_call, op_name
from day0.core.scopes import module_scopes
from day0.core.training import (
    GRAD_CLIP_NORM,
    LEARNING_RATE,
    MASTER_DTYPE,
    clip_gradients,
    make_optimizer,
    next_token_loss,
)
from day0.model.structure import _decoder_layers, layer_kinds

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["capture_operators", "reduced_depth"]

_MAX_EXAMPLES = 3
"""Distinct examples kept per op, plus one for each floating dtype the first ones do not show
(a bf16 model's sum runs at fp32 in its norms first, at bf16 later: both must be checked), and the
first optimizer-step call of an op the model already ran (clipping's fp32 scalar `add`)."""


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.records: dict[str, OpRecord] = {}
        self.constraints: dict[tuple[str, str], DtypeConstraint] = {}
        self.phase = "forward"
        self.scope = "model"

    def _record(self, name: str, args: tuple, kwargs: dict) -> None:
        rec = self.records.setdefault(name, OpRecord(op=name))
        rec.calls += 1
        first_optimizer_call = self.phase == "optimizer" and self.phase not in rec.phases
        for lst, item in ((rec.phases, self.phase), (rec.modules, self.scope)):
            if item not in lst:
                lst.append(item)
        for t in (a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)):
            if t.dtype.is_floating_point and dtype_name(t.dtype) not in rec.dtypes:
                rec.dtypes.append(dtype_name(t.dtype))
        example = describe_call(args, kwargs)
        if example not in rec.examples and (
            len(rec.examples) < _MAX_EXAMPLES or _new_dtype(rec.examples, example) or first_optimizer_call
        ):
            rec.examples.append(example)

    def _on_device(self, name: str, args: tuple, kwargs: dict) -> bool:
        """Whether the call runs on the device: not a profiler marker, and in the optimizer step
        not host-side bookkeeping (calls on CPU tensors only: AdamW's step counters)."""
        if name.startswith("profiler::"):
            return False
        tensors = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        return self.phase != "optimizer" or not tensors or any(t.is_meta for t in tensors)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        if not self._on_device(name, args, kwargs):
            return func(*args, **kwargs)
        self._record(name, args, kwargs)
        try:
            return func(*args, **kwargs)
        except RuntimeError as exc:
            floats = {
                t.dtype
                for t in torch.utils._pytree.tree_leaves(args)
                if isinstance(t, torch.Tensor) and t.dtype.is_floating_point and t.dtype != torch.bfloat16
            }
            if not floats:
                raise
            dtype = floats.pop()
            self.constraints.setdefault(
                (name, dtype_name(dtype)),
                DtypeConstraint(op=name, dtype=dtype_name(dtype), message=str(exc).splitlines()[0][:300]),
            )
            up = tree_map(
                lambda a: a.to(torch.bfloat16) if isinstance(a, torch.Tensor) and a.dtype.is_floating_point else a,
                (args, kwargs),
            )
            out = func(*up[0], **up[1])
            return tree_map(lambda o: o.to(dtype) if isinstance(o, torch.Tensor) and o.is_floating_point() else o, out)


def _floating(example: Example) -> set[str]:
    return {leaf for leaf in torch.utils._pytree.tree_leaves(example) if isinstance(leaf, str) and leaf in DTYPES}


def _new_dtype(examples: list[Example], example: Example) -> bool:
    """`example` has a floating dtype that none of `examples` has."""
    seen = set().union(*map(_floating, examples)) if examples else set()
    return bool(_floating(example) - seen)


def reduced_depth(model: PreTrainedModel, attention_kind: str) -> list[tuple[int, str]]:
    """Keep one decoder layer of each distinct kind (in order), in place.
    Returns (original layer index, kind) of the kept layers."""
    layers = _decoder_layers(model)
    seen: dict[str, int] = {}
    for i, (kind, _) in enumerate(layer_kinds(model, attention_kind)):
        seen.setdefault(kind, i)
    keep = sorted(seen.values())
    inner = getattr(model, "model", model)
    inner.layers = torch.nn.ModuleList([layers[i] for i in keep])
    model.config.num_hidden_layers = len(keep)
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[i] for i in keep]
    names = {i: k for k, i in seen.items()}
    return [(i, names[i]) for i in keep]


@contextmanager
def _meta_counts_as_tracing() -> Iterator[None]:
    """transformers skips data-dependent mask shortcuts (`.all()`, `.item()`) only while tracing;
    meta tensors have no data either, so let them take the same path."""
    from transformers import masking_utils

    original = masking_utils.is_tracing
    masking_utils.is_tracing = lambda tensor=None: tensor is None or tensor.is_meta or original(tensor)
    try:
        yield
    finally:
        masking_utils.is_tracing = original


@contextmanager
def _foreach_on_meta() -> Iterator[None]:
    """`clip_grad_norm_(foreach=True)` refuses devices without foreach kernels, meta among them;
    meta stands in for the trial's device here, which has them (the CPU and accelerators alike)."""
    from torch.nn.utils import clip_grad

    original = clip_grad._device_has_foreach_support
    clip_grad._device_has_foreach_support = lambda device: device.type == "meta" or original(device)
    try:
        yield
    finally:
        clip_grad._device_has_foreach_support = original


def _master_copies(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """fp32 (`MASTER_DTYPE`) meta stand-ins for the parameters that got a gradient, with gradients:
    what the trial's optimizer updates (fp32 parameters, bf16 only inside autocast)."""
    dtype = DTYPES[MASTER_DTYPE]
    masters = []
    for p in model.parameters():
        if p.grad is not None:
            master = torch.nn.Parameter(torch.empty_like(p, dtype=dtype))
            master.grad = torch.empty_like(master)
            masters.append(master)
    return masters


def _optimizer_step(recorder: _Recorder, params: list[torch.nn.Parameter], learning_rate: float) -> None:
    """One step as the trial takes it: clip, then the AdamW update (its first: state is created)."""
    optimizer = make_optimizer(params, learning_rate)
    with _foreach_on_meta(), recorder:
        recorder.phase, recorder.scope = "optimizer", "optimizer: gradient clipping"
        clip_gradients(params, GRAD_CLIP_NORM)
        recorder.scope = "optimizer: AdamW"
        optimizer.step()


def capture_operators(
    model: PreTrainedModel,
    attention_kind: str,
    compute_dtype: str = "bf16",
    seq_len: int = 16,
    batch: int = 1,
    learning_rate: float = LEARNING_RATE,
) -> OpInventory:
    """One training step of a reduced-depth meta copy: forward, the trial's loss, backward, then the
    trial's optimizer step. `model` must be a meta model (it is trimmed)."""
    start = time.perf_counter()
    kept = reduced_depth(model, attention_kind)
    model.to(DTYPES[compute_dtype])  # type: ignore[arg-type]  # transformers wraps .to in functools.wraps: mypy misses the bound self
    model.config.use_cache = False
    recorder = _Recorder()
    tokens = torch.zeros(batch, seq_len + 1, dtype=torch.long, device="meta")
    with _meta_counts_as_tracing(), module_scopes(model, recorder, kept), recorder:
        logits = model(input_ids=tokens[:, :-1], use_cache=False).logits
        recorder.scope = "loss"
        loss = next_token_loss(logits, tokens[:, 1:])
        recorder.phase = "backward"
        loss.backward()
    _optimizer_step(recorder, _master_copies(model), learning_rate)
    ops = sorted(recorder.records.values(), key=lambda r: r.op)
    return OpInventory(
        compute_dtype=compute_dtype,
        seq_len=seq_len,
        layers_captured=[k for _, k in kept],
        ops=ops,
        constraints=list(recorder.constraints.values()),
        capture_seconds=time.perf_counter() - start,
    )
