"""Operator inventory: every aten operator one training step runs (forward, loss, backward, then
gradient clipping and the AdamW update), captured with a `TorchDispatchMode` on a reduced-depth copy
of the model (same widths, one layer of each distinct kind) under meta tensors, so a 671B model's
inventory costs no memory. The loss and the optimizer step are step 5's own (`day0.core.training`),
run on fp32 master copies of the parameters as the trial's optimizer runs; each op records its
phases ('forward', 'backward', 'optimizer'). Host-side optimizer bookkeeping (the step counters live
on the CPU whatever the device) and profiler markers are not device kernels and are not recorded.

A CompositeImplicitAutograd (CIA) op decomposes above the dispatch mode, so it is recorded as its
pieces; a device that overrides one with its own kernel (torch_npu's `softmax.int`, `matmul`,
`scaled_dot_product_attention` ...) runs it whole. `keep_whole` names such ops: each gets a kernel of
ours at the meta device's autograd key that records the call, then runs the real decomposition with
its pieces unrecorded (their backward is recorded as autograd runs it). Not torch's Python
dispatcher: it would route every op through Python kernels that change the capture (`nll_loss`
reaches a Python meta kernel whole, with no autograd formula).

Contract: `capture_operators(model, ...)` never crashes on a kernel's dtype restriction: it records
the constraint (e.g. `aten::_grouped_mm` accepts only bf16), runs that call at bf16 so capture can go
on, and reports it in `OpInventory.constraints`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch._C import DispatchKey
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils._pytree import tree_map

from day0.core.dtypes import DTYPES, dtype_name
from day0.core.ops import (
    DtypeConstraint,
    Example,
    OpInventory,
    OpRecord,
    describe_call,
    is_composite_implicit,
    op_name,
    resolve_op,
)
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
    def __init__(self, max_examples: int = _MAX_EXAMPLES) -> None:
        super().__init__()
        self.max_examples = max_examples
        self.records: dict[str, OpRecord] = {}
        self.constraints: dict[tuple[str, str], DtypeConstraint] = {}
        self.phase = "forward"
        self.scope = "model"
        self.inside_whole = 0  # depth of kept-whole ops running their decomposition: pieces unrecorded

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
            len(rec.examples) < self.max_examples or _new_dtype(rec.examples, example) or first_optimizer_call
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
        if not self.inside_whole:
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


_AUTOGRAD_META = "AutogradMeta"


@contextmanager
def _kept_whole(recorder: _Recorder, names: Collection[str]) -> Iterator[list[str]]:
    """Record the CIA ops in `names` whole (module doc) while this is open: a kernel for the meta
    device's autograd key, as a vendor registers its override for its own (AutogradPrivateUse1);
    the registrations are removed whatever happens. Ops that reach the mode whole anyway (not CIA,
    or with a Meta kernel of their own) are left alone. Yields the names of the ops it keeps whole."""
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    ops = [
        resolve_op(name)
        for name in sorted(names)
        if is_composite_implicit(name) and not has_kernel(name, "Meta") and not has_kernel(name, _AUTOGRAD_META)
    ]
    libraries: dict[str, torch.library.Library] = {}
    try:
        for op in ops:
            namespace, _, overload = op_name(op).partition("::")
            if namespace not in libraries:
                libraries[namespace] = torch.library.Library(namespace, "IMPL")
            libraries[namespace].impl(overload, _whole(recorder, op), _AUTOGRAD_META)
        yield [op_name(op) for op in ops]
    finally:
        for library in libraries.values():
            library._destroy()


def _whole(recorder: _Recorder, op: torch._ops.OpOverload) -> Callable[..., object]:
    """Record the call (unless inside another kept op, or outside the recorder), then run the op's
    own decomposition with its pieces unrecorded; autograd records their backward as it runs it."""
    name = op_name(op)

    def kernel(*args: object, **kwargs: object) -> object:
        recording = recorder in _get_current_dispatch_mode_stack() and not recorder.inside_whole
        if recording and recorder._on_device(name, args, kwargs):
            recorder._record(name, args, kwargs)
        recorder.inside_whole += 1
        try:
            return op._op_dk(DispatchKey.CompositeImplicitAutograd, *args, **kwargs)
        finally:
            recorder.inside_whole -= 1

    return kernel


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
    keep_whole: Collection[str] = (),
    max_examples: int = _MAX_EXAMPLES,
) -> OpInventory:
    """One training step of a reduced-depth meta copy: forward, the trial's loss, backward, then the
    trial's optimizer step. `model` must be a meta model (it is trimmed). The CIA ops named in
    `keep_whole` ('aten::softmax.int') are recorded whole, as a device with their kernels runs them.
    `max_examples`: distinct call shapes kept per op (more at a production shape, where the largest
    GEMMs, the LM head's, come after the first few)."""
    start = time.perf_counter()
    kept = reduced_depth(model, attention_kind)
    model.to(DTYPES[compute_dtype])  # type: ignore[arg-type]  # transformers wraps .to in functools.wraps: mypy misses the bound self
    model.config.use_cache = False
    recorder = _Recorder(max_examples)
    tokens = torch.zeros(batch, seq_len + 1, dtype=torch.long, device="meta")
    with _kept_whole(recorder, keep_whole) as kept_whole:
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
        kept_whole=[op for op in kept_whole if op in recorder.records],  # those the step met
    )
