"""Which kind each operator is, and the thresholds its numbers are judged by: the policy of step 2's
per-operator checks (`day0.steps.operators.opcheck`), the layer comparison and the training-step check.

Layout ops (views) are compared exactly, ops that allocate uninitialised memory or draw random
numbers only for shape and dtype, everything else numerically; only accumulating ops (matmuls,
norms, softmax ...) may have cancellation outliers.
"""

from __future__ import annotations

import math

import torch
from torch.utils._pytree import tree_leaves

from day0.core.dtypes import DTYPES
from day0.core.ops import Call
from day0.core.precision import COMPUTE_DTYPES
from day0.steps.operators.config import ValidationSpec
from day0.steps.operators.metrics import Thresholds, default_thresholds
from day0.steps.operators.msprobe import MsprobeStandards, load_standards
from day0.steps.operators.result import Kind

__all__ = [
    "accumulates",
    "classify",
    "msprobe_standards",
    "norm_terms",
    "op_thresholds",
    "remember_standards",
    "thresholds_for",
]

_LAYOUT = {
    "view",
    "_unsafe_view",
    "reshape",
    "t",
    "transpose",
    "permute",
    "expand",
    "unsqueeze",
    "squeeze",
    "slice",
    "select",
    "alias",
    "detach",
    "split",
    "split_with_sizes",
    "as_strided",
    "unbind",
    "narrow",
    "contiguous",
    "clone",
    "_to_copy",
    "copy_",
    "unfold",
    "diagonal",
    "view_as_real",
    "view_as_complex",
}
_NONDETERMINISTIC = {
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "rand",
    "randn",
    "rand_like",
    "randn_like",
    "randint",
    "randperm",
    "bernoulli",
    "bernoulli_",
    "normal",
    "uniform_",
    "normal_",
    "dropout",
    "native_dropout",
    "multinomial",
    "exponential_",
}
_CREATION = {
    "arange",
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "new_zeros",
    "new_ones",
    "new_full",
    "scalar_tensor",
    "fill_",
    "zero_",
    "linspace",
    "eye",
    "tril_indices",
    "triu_indices",
}
# Ops whose output element accumulates many rounded terms (the sum of a matmul, norm or softmax
# row; scatter/index accumulation): error bound ~ n*u*sum|terms| (Higham, Accuracy and Stability
# of Numerical Algorithms, sec. 4.2), not u*|result|, so a result that cancels to near zero is off
# elementwise while the op is right. Every other op rounds each output element once or twice.
_ACCUMULATING = {
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "addmv",
    "mv",
    "dot",
    "matmul",
    "linear",
    "_grouped_mm",
    "convolution",
    "einsum",
    "sum",
    "mean",
    "prod",
    "var",
    "std",
    "var_mean",
    "norm",
    "linalg_vector_norm",
    "_foreach_norm",
    "logsumexp",
    "cumsum",
    "cumprod",
    "_softmax",
    "_safe_softmax",
    "_log_softmax",
    "softmax",
    "log_softmax",
    "_softmax_backward_data",
    "_log_softmax_backward_data",
    "native_layer_norm",
    "native_layer_norm_backward",
    "_fused_rms_norm",
    "_fused_rms_norm_backward",
    "nll_loss_forward",
    "nll_loss2d_forward",
    "embedding_dense_backward",
    "embedding_bag",
    "index_put",
    "index_put_",
    "index_add",
    "index_add_",
    "scatter_add",
    "scatter_add_",
    "scatter_reduce",
    "index_reduce",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_attention_math",
    # CompositeImplicitAutograd ops a device may run whole (step 1's `keep_whole`): one kernel that
    # sums a softmax row and a matmul, or a norm
    "scaled_dot_product_attention",
    "rms_norm",
    "layer_norm",
}


def classify(op: str) -> Kind:
    base = op.split("::", 1)[-1].split(".")[0]
    if base in _NONDETERMINISTIC:
        return "nondeterministic"
    if base in _LAYOUT:
        return "layout"
    if base in _CREATION:
        return "creation"
    return "compute"


def accumulates(op: str) -> bool:
    """Whether each output element of `op` sums many rounded terms (a matmul, norm, softmax ...)."""
    return op.split("::", 1)[-1].split(".")[0] in _ACCUMULATING


_STANDARDS: dict[str, MsprobeStandards] = {}  # msprobe version -> its standards, read once per process


def remember_standards(standards: MsprobeStandards) -> None:
    """Standards the run resolved where it started: a worker without the wheel or the snapshot uses them."""
    _STANDARDS[standards.version] = standards


def msprobe_standards(validation: ValidationSpec) -> MsprobeStandards | None:
    """msprobe's standards when `validation.tolerance` is msprobe (remembered, else read once: the
    cached wheel, else day0's snapshot), None for torch's tolerances."""
    if validation.tolerance != "msprobe":
        return None
    version = validation.msprobe_version
    if version not in _STANDARDS:
        _STANDARDS[version] = load_standards(version)
    return _STANDARDS[version]


def thresholds_for(dtype: str, validation: ValidationSpec) -> Thresholds:
    tol = validation.tolerances.get(dtype) if dtype in COMPUTE_DTYPES else None  # its keys are compute dtypes
    base = default_thresholds(dtype, validation.min_cosine)
    return base.model_copy(update={"rtol": tol.rtol, "atol": tol.atol}) if tol else base


def op_thresholds(op: str, dtype: str, validation: ValidationSpec, terms: int = 1) -> Thresholds:
    """The thresholds for one call of `op` at `dtype` ('int' and other non-floating names: fp32's).
    Only an accumulating op may have cancellation outliers (see `metrics.verdict`); every other op
    must keep each element within atol + rtol*|ref|, as torch.testing.assert_close asks.

    A whole-tensor norm sums `terms` squares into each output (gradient clipping's per-parameter
    norms: a million terms for an embedding): its rtol is at least sqrt(terms) * u of the fp32
    accumulator, the statistical error of recursive summation (Higham, sec. 2.8 and 4.2), which a
    correct kernel summing serially in vector lanes reaches (the CPU's fp32 norm: 1e-5 at 2^20 terms)."""
    t = thresholds_for(dtype if dtype in DTYPES else "fp32", validation)
    if not accumulates(op):
        return t.model_copy(update={"max_share_beyond": 0.0, "rms_share": 0.0})
    summation = math.sqrt(terms) * torch.finfo(torch.float32).eps / 2
    return t.model_copy(update={"rtol": summation}) if summation > t.rtol else t


def norm_terms(op: str, call: Call) -> int:
    """Terms one output of a whole-tensor norm sums (`_foreach_norm`, `linalg_vector_norm` without
    `dim`): the largest input's elements; 1 for every other op."""
    args, kwargs = call
    base = op.split("::", 1)[-1].split(".")[0]
    whole = base == "_foreach_norm" or (
        base == "linalg_vector_norm" and (len(args) < 3 or args[2] is None) and kwargs.get("dim") is None
    )
    return max((t.numel() for t in tree_leaves(args[:1]) if isinstance(t, torch.Tensor)), default=1) if whole else 1
