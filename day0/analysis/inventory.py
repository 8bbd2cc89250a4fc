"""Operator inventory: every aten operator one forward+backward pass runs, captured with a
`TorchDispatchMode` on a reduced-depth copy of the model (same widths, one layer of each distinct
kind) under meta tensors, so a 671B model's inventory costs no memory.

Contract: `capture_operators(model, ...)` never crashes on a kernel's dtype restriction: it records
the constraint (e.g. `aten::_grouped_mm` accepts only bf16), runs that call at bf16 so capture can go
on, and reports it in `OpInventory.constraints`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from day0.analysis.structure import _decoder_layers, layer_kinds
from day0.core.dtypes import DTYPES, dtype_name
from day0.core.ops import DtypeConstraint, OpInventory, OpRecord, describe_call, op_name

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["capture_operators", "reduced_depth"]

_MAX_EXAMPLES = 3
"""Distinct examples kept per op, plus one for each floating dtype the first ones do not show
(a bf16 model's sum runs at fp32 in its norms first, at bf16 later: both must be checked)."""


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
        for lst, item in ((rec.phases, self.phase), (rec.modules, self.scope)):
            if item not in lst:
                lst.append(item)
        for t in (a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)):
            if t.dtype.is_floating_point and dtype_name(t.dtype) not in rec.dtypes:
                rec.dtypes.append(dtype_name(t.dtype))
        example = describe_call(args, kwargs)
        if example not in rec.examples and (len(rec.examples) < _MAX_EXAMPLES or _new_dtype(rec.examples, example)):
            rec.examples.append(example)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
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


def _floating(example: list[Any]) -> set[str]:
    return {leaf for leaf in torch.utils._pytree.tree_leaves(example) if isinstance(leaf, str) and leaf in DTYPES}


def _new_dtype(examples: list[list[Any]], example: list[Any]) -> bool:
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
def _scopes(model: PreTrainedModel, recorder: _Recorder, kept: list[tuple[int, str]]) -> Iterator[None]:
    """Name the module each op runs in: top-level units and decoder layers, forward and backward."""
    inner: Any = getattr(model, "model", model)  # the decoder stack: its attributes vary by architecture
    units: list[tuple[str, torch.nn.Module]] = [
        (f"layers.{index} ({kind})", layer) for (index, kind), layer in zip(kept, inner.layers)
    ]
    units += [(n, m) for n, m in inner.named_children() if n != "layers"]
    units += [(n, m) for n, m in model.named_children() if n != "model"]
    handles = []
    for label, module in units:

        def enter(*_: Any, _label: str = label) -> None:
            recorder.scope = _label

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_full_backward_pre_hook(enter))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def capture_operators(
    model: PreTrainedModel, attention_kind: str, compute_dtype: str = "bf16", seq_len: int = 16, batch: int = 1
) -> OpInventory:
    """Forward + backward of a reduced-depth meta copy; `model` must be a meta model (it is trimmed)."""
    start = time.perf_counter()
    kept = reduced_depth(model, attention_kind)
    model.to(DTYPES[compute_dtype])  # type: ignore[arg-type]  # transformers wraps .to in functools.wraps: mypy misses the bound self
    model.config.use_cache = False
    recorder = _Recorder()
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device="meta")
    with _meta_counts_as_tracing(), _scopes(model, recorder, kept), recorder:
        out = model(input_ids=ids, labels=ids, use_cache=False)
        recorder.phase, recorder.scope = "backward", "loss"
        out.loss.backward()
    ops = sorted(recorder.records.values(), key=lambda r: r.op)
    return OpInventory(
        compute_dtype=compute_dtype,
        seq_len=seq_len,
        layers_captured=[k for _, k in kept],
        ops=ops,
        constraints=list(recorder.constraints.values()),
        capture_seconds=time.perf_counter() - start,
    )
