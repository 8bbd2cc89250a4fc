"""The cost-model terms added for the published runs, each against its formula."""

from __future__ import annotations

import pytest

from day0.model.structure import ModelStructure
from day0.planner import timing as tm
from day0.planner.inputs import PlannerOptions, costs_for
from day0.planner.memory import dualpipe_weight_bytes, zero3_unit_params
from day0.planner.model import is_gated
from tests.fixtures import paths

DATA = paths.DATA / "planner"


def _structure(name: str) -> ModelStructure:
    path = DATA / "published" / f"{name}.structure.json"
    return ModelStructure.model_validate_json((path if path.exists() else DATA / f"{name}.structure.json").read_text())


def test_gemm_roofline_rises_with_size_to_the_dtype_roof() -> None:
    peak, hbm = 989e12, 3.0e12
    eff = [tm.gemm_efficiency([(n, n, n)], 2, peak, 0.8, hbm) for n in (256, 1024, 4096, 16384)]
    assert eff == sorted(eff) and 0.75 < eff[-1] < 0.8 and eff[0] < 0.5  # the roof is approached, never passed
    thin = tm.gemm_efficiency([(64, 7168, 2048)], 2, peak, 0.8, hbm)  # few tokens per expert
    assert thin < 0.3 * 0.8 + 0.1
    fp8 = tm.gemm_efficiency([(8192, 8192, 8192)], 1, 2 * peak, 0.65, hbm)
    assert 0.55 < fp8 < 0.65  # fp8 has its own roof (and halves the bytes), not twice bf16's throughput


def test_node_limited_routing_caps_the_nic_traffic_only_when_sent_once_per_node() -> None:
    # EP64 over 8 nodes, top-8: rank to rank, 7/8 of the 8 copies cross the NIC, node limit or not; sent once per
    # node (DeepEP), at most 4 nodes: 4 x 7/8, and with no limit min(8 copies, 8 nodes) x 7/8
    args = (4096, 8, 7168, 64, 1, 8, 160, 50)
    free = tm.expert_alltoall_seconds(*args, None)
    assert free == pytest.approx(4096 * 7168 * 8 * 56 / 64 / 50e9)
    assert tm.expert_alltoall_seconds(*args, 4) == free
    assert tm.expert_alltoall_seconds(*args, 4, once_per_node=True) == pytest.approx(4096 * 7168 * 4 * 7 / 8 / 50e9)
    assert tm.expert_alltoall_seconds(*args, None, once_per_node=True) == pytest.approx(free)
    assert tm.expert_alltoall_seconds(4096, 8, 7168, 8, 1, 8, 160, 50, 4, once_per_node=True) == pytest.approx(
        4096 * 7168 * 8 * 7 / 8 / 160e9
    )  # one node: NVLink only


def test_dualpipe_halves_the_bubble_and_keeps_two_weight_copies() -> None:
    assert tm.pipeline_seconds(32, 16, 1, 1.0) == (32 + 15, 15)
    assert tm.pipeline_seconds(32, 16, 1, 1.0, dualpipe=True) == (32 + 7, 7)
    assert dualpipe_weight_bytes(10.0, True) == 10.0 and dualpipe_weight_bytes(10.0, False) == 0.0


def test_overlap_costs_the_sms_it_takes() -> None:
    assert tm.exposed(1.0, 2.0, overlap=True, sm_fraction=0.15) == pytest.approx(0.15)
    assert tm.exposed(3.0, 2.0, overlap=True, sm_fraction=0.15) == pytest.approx(1.45)
    assert tm.exposed(3.0, 2.0, overlap=False, sm_fraction=0.15) == 3.0


def test_zero3_gathers_the_largest_unit_of_an_moe_layer() -> None:
    assert zero3_unit_params(100.0, 1.0, 0.0) == 101.0
    assert zero3_unit_params(100.0, 1.0, 500.0) == 500.0  # local experts gathered apart from attention


def test_gated_and_plain_mlps_are_told_apart() -> None:
    assert not is_gated(_structure("gpt-175b")) and is_gated(_structure("llama-3.1-405b"))
    assert is_gated(_structure("deepseek-v3"))


def test_fp8_adds_cast_traffic_and_mtp_adds_a_layer_and_a_head() -> None:
    s, o = _structure("deepseek-v3"), PlannerOptions()
    bf16, fp8 = costs_for(s, o, "bf16"), costs_for(s, o, "fp8")
    assert all(b.memory_bound_bytes < f.memory_bound_bytes for b, f in zip(bf16.kinds, fp8.kinds))
    mtp = costs_for(s, o.model_copy(update={"mtp_layers": 1}), "bf16")
    assert mtp.num_layers == bf16.num_layers + 1 and mtp.head_flops_per_token == 2 * bf16.head_flops_per_token


def test_host_dispatch_adds_on_a_cpu_and_hides_behind_a_busy_gpu() -> None:
    assert tm.launch_seconds(1000, 10e-6, 0.5, asynchronous=False) == pytest.approx(0.01)  # kernels x seconds
    assert tm.launch_seconds(2000, 10e-6, 0.5, asynchronous=False) == pytest.approx(0.02)  # linear in the count
    assert tm.launch_seconds(1000, 10e-6, 0.5, asynchronous=True) == 0.0  # queued ahead of a busy device
    assert tm.launch_seconds(1000, 10e-6, 0.004, asynchronous=True) == pytest.approx(0.006)  # host-bound


def _trial_context(hardware, micro_batch: int = 2):
    from day0.planner.evaluate import PlanContext
    from day0.planner.inputs import cluster_figures
    from day0.planner.problem import PlanningProblem
    from day0.planner.values import Degrees
    from day0.spec.pipeline import Precision, TrainingSpec

    s = _structure("deepseek-v3")
    o = PlannerOptions(micro_batches=[micro_batch], flash_attention=False)
    d = Degrees(
        tensor_parallel=1,
        pipeline_parallel=1,
        virtual_pipeline_stages=1,
        expert_parallel=1,
        expert_tensor_parallel=1,
        context_parallel=1,
        data_parallel=1,
        micro_batch=micro_batch,
        num_microbatches=1,
    )
    tr = TrainingSpec(seq_len=64, global_batch=micro_batch, micro_batch=micro_batch, precision=Precision())
    return PlanContext(PlanningProblem.of(s, cluster_figures(hardware, 1, 1), tr, options=o), d)


def test_stage_time_carries_one_dispatch_per_op_on_a_synchronous_platform() -> None:
    from day0.planner.kernels import model_kernels
    from day0.planner.values import MemoryKnobs
    from day0.spec.pipeline import load_platform

    cpu = load_platform("cpu").hardware
    assert not cpu.launch_async and cpu.kernel_launch_us > 0
    knobs = MemoryKnobs(recompute="none", zero_stage=0, offload="none")
    with_ops = _trial_context(cpu).time(knobs).step_s
    without = _trial_context(cpu.model_copy(update={"kernel_launch_us": 0.0})).time(knobs).step_s
    c = _trial_context(cpu).costs
    k = model_kernels(c, "bf16")
    moe = sum(1 for i in c.layer_kind if c.kinds[i].is_moe)
    ops = c.num_layers * k.dense_layer + moe * k.moe_extra + k.outside + k.optimizer
    assert with_ops - without == pytest.approx(ops * cpu.kernel_launch_us * 1e-6, rel=1e-9)
    # a bigger micro-batch pays the same dispatch: its share of the step falls
    big = (
        _trial_context(cpu, 8).time(knobs).step_s
        - _trial_context(cpu.model_copy(update={"kernel_launch_us": 0.0}), 8).time(knobs).step_s
    )
    assert big == pytest.approx(with_ops - without, rel=1e-9)
    assert big / _trial_context(cpu, 8).time(knobs).step_s < (with_ops - without) / with_ops


def test_dispatch_is_hidden_on_an_h100_and_the_foreach_optimizer_costs_more_passes() -> None:
    from day0.planner import step_time as st
    from day0.planner.memory import param_bytes
    from day0.planner.values import MemoryKnobs
    from day0.spec.pipeline import load_platform

    h100 = load_platform("h100").hardware
    knobs = MemoryKnobs(recompute="none", zero_stage=0, offload="none")
    hidden = _trial_context(h100, 8).time(knobs).step_s
    assert hidden == _trial_context(h100.model_copy(update={"kernel_launch_us": 0.0}), 8).time(knobs).step_s
    pb, o = param_bytes("bf16", "fp32", "fp32", "fp32"), PlannerOptions()
    fused = st.optimizer_seconds_per_param("none", pb, o)
    foreach = st.optimizer_seconds_per_param("none", pb, o.model_copy(update={"fused_optimizer": False}))
    assert fused == pytest.approx((24 + 4 + 2) / 3000e9) and foreach == pytest.approx(84 / 3000e9)


def test_calibrated_gemm_rates_are_read_by_shape() -> None:
    """A measured shape gets its own rate; a shape between two takes a rate between theirs; beyond the
    measured range the nearest edge's rate holds; thin expert GEMMs read the slow thin points."""
    points = [(32, 256, 256, 0.04), (128, 256, 256, 0.09), (512, 512, 512, 0.13), (2048, 512, 512, 0.16)]
    assert tm.measured_tflops(128, 256, 256, points) == 0.09
    between = tm.measured_tflops(64, 256, 256, points)
    assert 0.04 < between < 0.09
    assert tm.measured_tflops(16384, 4096, 4096, points) == pytest.approx(0.16, rel=0.1)
    peak = 0.5e12
    thin = tm.gemm_efficiency([(32, 256, 256)], 2, peak, 0.8, 20e9, points)
    big = tm.gemm_efficiency([(2048, 512, 512)], 2, peak, 0.8, 20e9, points)
    assert thin == pytest.approx(0.04e12 / peak) and big == pytest.approx(0.16e12 / peak)
    assert tm.gemm_efficiency([(32, 256, 256)], 2, peak, 0.8, 20e9) > thin  # the roofline alone is optimistic


def test_calibrated_foreach_optimizer_costs_replace_its_bytes_model() -> None:
    from day0.planner import step_time as st
    from day0.planner.memory import param_bytes

    pb = param_bytes("bf16", "fp32", "fp32", "fp32")
    o = PlannerOptions(fused_optimizer=False, foreach_optimizer_costs=(50.0, 6.0))
    assert st.optimizer_seconds_per_param("none", pb, o) == pytest.approx(6e-9)
    fused = o.model_copy(update={"fused_optimizer": True})  # a fused Adam is not what was measured
    assert st.optimizer_seconds_per_param("none", pb, fused) == pytest.approx((24 + 4 + 2) / 3000e9)
