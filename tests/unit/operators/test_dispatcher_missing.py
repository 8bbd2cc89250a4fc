"""A real device's dispatcher saying it has no kernel is the platform's missing kernel (step 2 adapts it)."""

from __future__ import annotations

import pytest
import torch

from day0.platforms.kernels import MissingKernelError, Platform


def test_could_not_run_becomes_a_missing_kernel_naming_the_op_called() -> None:
    # aten::_copy_from has no CPU kernel: the dispatcher raises for it as for a device that lacks an op
    a, b = torch.ones(3), torch.zeros(3)
    with pytest.raises(MissingKernelError) as raised, Platform("host").mode():
        torch.ops.aten._copy_from(a, b)
    assert raised.value.op == "aten::_copy_from" and raised.value.dtype == "fp32"
    assert raised.value.example is not None and "Could not run" in str(raised.value)


def test_other_not_implemented_errors_pass_through() -> None:
    with pytest.raises(NotImplementedError) as raised, Platform("host").mode():
        torch.histc(torch.ones(4, dtype=torch.int32), bins=2)  # a CPU kernel that rejects a dtype
    assert not isinstance(raised.value, MissingKernelError)


def test_an_integer_ops_upcast_is_rebuilt_for_the_trial() -> None:
    from day0.platforms.adapted import AdaptedKernel, apply_adaptations

    platform = Platform("host")
    notes = apply_adaptations(platform, [AdaptedKernel(op="aten::histc", dtype="int", strategy="upcast")])
    assert notes == []
    with platform.mode():  # the host's histc rejects int32; the rebuilt upcast serves it
        counts = torch.histc(torch.tensor([0, 1, 1, 3], dtype=torch.int32), bins=2, min=0, max=3)
    assert counts.dtype == torch.int32 and counts.tolist() == [3, 1]
