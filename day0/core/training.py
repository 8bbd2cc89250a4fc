"""The training step's recipe, defined once: the loss, gradient clipping and the AdamW update.

Step 5's loop trains with these functions; step 1 runs the same functions on meta tensors to put
the ops of one optimizer step in the inventory, so what step 2 checks is what the trial runs.

- AdamW takes the multi-tensor (`foreach`) kernels on every device. torch's default picks them on
  accelerators and the per-tensor loop on the CPU and meta; choosing explicitly keeps the CPU
  trial, an accelerator trial and the capture on the same ops (`aten::_foreach_*`).
- Gradients are clipped to a total 2-norm with the foreach kernels too (`_foreach_norm`, then one
  `_foreach_mul_` by the clamped coefficient), like `torch.nn.utils.clip_grad_norm_`.
- Master weights (what the optimizer updates) are fp32: the trial trains bf16 under autocast with
  fp32 parameters, so its optimizer ops run at fp32 whatever the compute dtype.
- The model is called one way (`forward_loss`): step 5's loop and step 2's training-step check run
  the same calls, so the ops step 2 meets at run time are the ones the candidate will meet.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

__all__ = [
    "ADAMW_BETAS",
    "ADAMW_EPS",
    "FOREACH",
    "GRAD_CLIP_NORM",
    "LEARNING_RATE",
    "MASTER_DTYPE",
    "WEIGHT_DECAY",
    "clip_gradients",
    "forward_loss",
    "make_optimizer",
    "next_token_loss",
]

ADAMW_BETAS = (0.9, 0.999)  # torch's defaults (Loshchilov & Hutter, Decoupled Weight Decay Regularization)
ADAMW_EPS = 1e-8
WEIGHT_DECAY = 0.0  # the trial's default: a 40-step trial does not need regularising
GRAD_CLIP_NORM = 1.0  # max total 2-norm of the gradients
FOREACH = True  # multi-tensor kernels on every device (see the module docstring)
MASTER_DTYPE = "fp32"  # the dtype the optimizer updates (day0.core.dtypes name)
LEARNING_RATE = 3e-4  # the spec's default trial learning rate; the capture's step-size scalars


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of `logits` (batch, seq, vocab) against `targets` (batch, seq), in fp32."""
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))


def forward_loss(model: torch.nn.Module, batch: torch.Tensor, compute_dtype: torch.dtype) -> torch.Tensor:
    """The next-token loss of `batch` (batch, seq + 1): fp32 parameters, the model under autocast at
    `compute_dtype` (off at fp32), the loss in fp32."""
    with torch.autocast(batch.device.type, dtype=compute_dtype, enabled=compute_dtype != torch.float32):
        logits = model(input_ids=batch[:, :-1]).logits
    return next_token_loss(logits, batch[:, 1:])


def make_optimizer(
    params: Iterable[torch.nn.Parameter], learning_rate: float, weight_decay: float = WEIGHT_DECAY
) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        params, lr=learning_rate, betas=ADAMW_BETAS, eps=ADAMW_EPS, weight_decay=weight_decay, foreach=FOREACH
    )


def clip_gradients(params: Iterable[torch.nn.Parameter], max_norm: float = GRAD_CLIP_NORM) -> torch.Tensor:
    """Scale the gradients to a total 2-norm of at most `max_norm`; returns the norm before clipping."""
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=FOREACH)
