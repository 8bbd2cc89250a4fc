"""Step 2's training-step check: one step of the trial's own recipe (`day0.core.training`: fp32
parameters, autocast at the compute dtype, the next-token loss, backward, gradient clipping, AdamW)
on the reduced-depth model under the platform, against the same step on the host's stock kernels.

Why: step 1 captures on meta tensors at the model's dtype, while step 5's candidate trains real
tensors under autocast. That takes paths the capture cannot see: transformers' data-dependent mask
shortcuts (`aten::all`, `.item()`), tensors made on the fly (`aten::lift_fresh`), the optimizer's
step counters, and ops autocast leaves at fp32 (`aten::_grouped_mm` on fp32 weights). The check
meets them first, so step 2 adapts what the platform lacks (`report._missing` feeds the same loop as
the layer comparison) and the candidate trains on kernels step 2 verified; the loss, the clipped
gradients and the optimizer's update are compared with the host's. The platform's model is wrapped
in DDP over a one-rank gloo group, as the trial's data-parallel workers wrap it, so the reducer's
bucket averaging (`aten::mul.out`) runs through the platform too.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

import torch

from day0.core.dtypes import DTYPES
from day0.core.training import LEARNING_RATE, clip_gradients, forward_loss, make_optimizer
from day0.platforms.kernels import MissingKernelError, Platform
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.metrics import compare, verdict, within_control
from day0.steps.operators.op_policy import thresholds_for
from day0.steps.operators.result import TrainingStepCheck, TrainingStepRow

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["check_training_step"]


@contextlib.contextmanager
def _data_parallel(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`model` under DDP in a one-rank gloo group of this process (the process's own group if it has one)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield DistributedDataParallel(model)
    finally:
        if own:
            dist.destroy_process_group()


def _step(
    model: torch.nn.Module, batch: torch.Tensor, dtype: torch.dtype, mode: contextlib.AbstractContextManager[object]
) -> dict[str, torch.Tensor]:
    """One trial step of `model` (modified): the loss, the clipped gradients and the update, flat in fp64."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    optimizer = make_optimizer(params, LEARNING_RATE)
    with mode:
        loss = forward_loss(model, batch, dtype)
        loss.backward()
        clip_gradients(params)
        grads = [p.grad.detach().clone() for p in params if p.grad is not None]
        optimizer.step()
    flat = lambda ts: torch.cat([t.detach().flatten().to("cpu", torch.float64) for t in ts])  # noqa: E731
    return {
        "loss": loss.detach().reshape(1),
        "gradients": flat(grads),
        "update": flat([p.detach() - b for p, b in zip(params, before, strict=True)]),
    }


def check_training_step(
    model: PreTrainedModel,
    platform: Platform,
    compute_dtype: str,
    validation: ValidationSpec | None = None,
    *,
    seed: int = 0,
    batch: int = 2,
    seq_len: int = 32,
) -> TrainingStepCheck:
    """The trial's step on `platform` vs on the host's stock kernels, same weights and tokens; `model`
    is not modified. An op the platform lacks stops the run: `error` says which, `_missing` holds it."""
    validation = validation or ValidationSpec()
    start = time.perf_counter()
    dtype = DTYPES[compute_dtype]
    tokens = torch.randint(
        0, model.config.vocab_size, (batch, seq_len + 1), generator=torch.Generator().manual_seed(seed)
    )
    reference = _step(copy.deepcopy(model).float(), tokens, dtype, contextlib.nullcontext())
    # the control: how far a correct step at the compute dtype is from the same step at fp32 (none at fp32)
    control = (
        _step(copy.deepcopy(model).float(), tokens, torch.float32, contextlib.nullcontext())
        if dtype != torch.float32
        else None
    )
    check = TrainingStepCheck(compute_dtype=compute_dtype, loss_reference=float(reference["loss"]), seconds=0.0)
    mode = platform.mode()
    try:
        with _data_parallel(copy.deepcopy(model).float().to(platform.device)) as candidate:
            measured = _step(candidate, tokens.to(platform.device), dtype, mode)
    except Exception as exc:  # noqa: BLE001 - a kernel that raises is a finding, not a crash
        check.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        check._missing = exc if isinstance(exc, MissingKernelError) else None
        check.seconds = time.perf_counter() - start
        return check
    check.loss_platform = float(measured["loss"])
    check.ops = len({op for op, _ in mode.served})
    sources: Counter[str] = Counter()
    for (_, source), n in mode.served.items():
        sources[source] += n
    check.kernel_calls = dict(sorted(sources.items()))
    quantities: tuple[tuple[Literal["loss", "gradients", "update"], str], ...] = (
        ("loss", "fp32"),
        ("gradients", compute_dtype),
        ("update", "fp32"),
    )
    for what, at in quantities:
        # the sum of many rounded ops: judged on RMS error and cosine, not elementwise (as the layers are)
        t = thresholds_for(at, validation).model_copy(update={"rms_share": 1.0})
        m = compare(measured[what], reference[what], t, DTYPES[at])
        ok, why = verdict(m, t)
        if not ok and control is not None:
            spread = compare(reference[what], control[what], t, DTYPES[at])
            ok, why = within_control(
                m, spread, validation.control_factor, f"the host's step at {compute_dtype} vs fp32"
            )
        check.rows.append(TrainingStepRow(quantity=what, metrics=m, passed=ok, reason=why))
    check.seconds = time.perf_counter() - start
    return check
