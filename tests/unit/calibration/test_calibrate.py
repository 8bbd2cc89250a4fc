"""`day0 calibrate`: real microbenchmarks on real Ray workers (gloo on the CPU), the profile in the store,
the report beside the datasheet, and the planner reading it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from day0.calibration import CalibrationError, CalibrationSizes, calibrate
from day0.calibration.figures import bus_gbps, gemm_tflops, microseconds_per_op, optimizer_costs
from day0.planner.inputs import PlannerOptions
from day0.planner.profile import CalibratedProfile, apply_profile, load_profile, profile_key
from day0.spec.pipeline import load_platform
from day0.store import open_store


def test_bus_bandwidth_follows_nccl_tests() -> None:
    # 1 GB in 0.1 s on 8 ranks: algbw 10 GB/s; all-reduce bus = x 2·7/8, all-gather / all-to-all = x 7/8
    assert bus_gbps("all_reduce", 10**9, 8, 0.1) == pytest.approx(17.5)
    assert bus_gbps("all_gather", 10**9, 8, 0.1) == pytest.approx(8.75)
    assert bus_gbps("all_to_all", 10**9, 8, 0.1) == pytest.approx(8.75)
    assert gemm_tflops(1000, 1000, 1000, 0.002) == pytest.approx(1.0)


def test_gemm_rate_is_net_of_the_dispatch_around_it() -> None:
    # a layer's forward + backward: 3 GEMMs; 1 ms of its 3 ms was the host dispatching ops around them
    assert gemm_tflops(1000, 1000, 1000, 0.003, gemms=3, host_s=0.001) == pytest.approx(3.0)
    # a timing the dispatch would swallow whole is read at half its time, not as an infinite rate
    assert gemm_tflops(1000, 1000, 1000, 0.002, host_s=0.005) == pytest.approx(2.0)


def test_optimizer_costs_split_per_tensor_from_per_element() -> None:
    # 4 tensors in 10 ms and 104 in 20 ms over 1M elements: 100 us per tensor, (10 - 0.4) ms / 1M elements
    assert optimizer_costs((4, 0.010), (104, 0.020), 10**6) == pytest.approx((100.0, 9.6))
    assert optimizer_costs((4, 0.010), (104, 0.009), 10**6) == pytest.approx((0.0, 10.0))  # noise: never negative
    with pytest.raises(ValueError, match="more tensors"):
        optimizer_costs((8, 0.01), (8, 0.02), 10**6)
    with pytest.raises(ValueError, match="optimizer_tensors"):  # refused before anything is measured
        CalibrationSizes(optimizer_tensors=(64, 8))


def test_host_time_per_op_is_time_over_ops() -> None:
    assert microseconds_per_op(0.006, 600) == pytest.approx(10.0)
    with pytest.raises(ValueError, match="at least one op"):
        microseconds_per_op(0.006, 0)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    import ray

    store = open_store(f"file://{tmp_path_factory.mktemp('store')}")
    sizes = CalibrationSizes(
        gemm=[(128, 128, 128), (256, 256, 256)],
        dtypes=["fp32", "bf16", "fp8"],
        copy_bytes=[1 << 20],
        message_bytes=[1 << 10, 1 << 18],
        repeats=3,
        dispatch_steps=2,
        optimizer_params=1 << 16,
        optimizer_tensors=(2, 32),
    )
    try:
        yield calibrate(load_platform("cpu"), 2, store, sizes, progress=SAID.append), store
    finally:
        ray.shutdown()


SAID: list[str] = []  # the report fixture's progress lines


@pytest.mark.integration  # over 10 s here: a whole model or the real CLI end to end
def test_profile_is_measured_and_stored(report) -> None:
    rep, store = report
    p = rep.profile
    assert store.exists(profile_key("cpu")) and load_profile(store, "cpu") == p
    assert p.backend == "gloo" and p.workers == 2
    # who measured it, and where: this host's user, and its Ray workers' host and devices
    assert p.measured is not None and p.measured.user and p.measured.host == socket.gethostname()
    assert p.measured.nodes == [socket.gethostname()] and len(p.measured.devices) == 2
    assert all(d.startswith("cpu: ") for d in p.measured.devices) and p.replaced is None
    assert {(g.dtype, g.m) for g in p.gemm} == {("fp32", 128), ("fp32", 256), ("bf16", 128), ("bf16", 256)}
    assert all(g.tflops > 0 for g in p.gemm)  # fp8 has no CPU GEMM: skipped, not invented
    assert p.hbm_bandwidth_gbps > 0.1
    assert {(c.op, c.bytes) for c in p.collectives} == {
        (op, b) for op in ("all_reduce", "all_gather", "all_to_all") for b in (1 << 10, 1 << 18)
    }
    big = {c.op: c.bus_gbps for c in p.collectives if c.bytes == 1 << 18}
    small = {c.op: c.bus_gbps for c in p.collectives if c.bytes == 1 << 10}
    assert all(big[op] > small[op] for op in big)  # latency dominates small messages
    assert p.collective_latency_us == pytest.approx(min(c.seconds for c in p.collectives if c.op == "all_reduce") * 1e6)
    # a tiny forward + backward's time over the aten ops it dispatched: microseconds, not nothing
    assert p.kernel_launch_us is not None and 0.1 < p.kernel_launch_us < 10_000
    # the trial's AdamW step: a real per-element cost; the per-tensor one may be lost in noise, never below 0
    assert p.optimizer_ns_per_param is not None and p.optimizer_ns_per_param > 0
    assert p.optimizer_us_per_tensor is not None and p.optimizer_us_per_tensor >= 0


def test_calibration_says_each_stage(report) -> None:
    """Issue 42: `day0 calibrate` printed nothing for minutes; each stage is said as it starts."""
    expected = [
        "starting a local Ray",
        "placing 2 worker(s), each asking Ray for {'num_cpus': 1}",
        "measuring: host time per op",
        "measuring: fp32 GEMMs, 2 shapes",
        "measuring: bf16 GEMMs, 2 shapes",
        "measuring: fp8 GEMMs, 2 shapes",
        "measuring: the optimizer step, memory copies",
        "measuring: collectives over 2 workers (gloo)",
    ]
    assert expected == SAID


def test_report_sets_calibrated_beside_datasheet(report) -> None:
    rep, _ = report
    rows = {r.figure: r for r in rep.rows()}
    assert rows["bf16 GEMM peak"].datasheet == 0.5 and rows["bf16 GEMM peak"].calibrated == rep.profile.best_tflops(
        "bf16"
    )
    assert rows["fp8 GEMM peak"].calibrated is None
    assert rows["host time per op (fwd+bwd)"].calibrated == rep.profile.kernel_launch_us
    assert rows["host time per op (fwd+bwd)"].datasheet == 12
    assert rows["foreach AdamW step, per element"].calibrated == rep.profile.optimizer_ns_per_param
    text = rep.to_markdown()
    assert "| figure | datasheet | calibrated | unit |" in text and "all-to-all bus bandwidth" in text


def test_the_planner_uses_the_measured_figures(report) -> None:
    rep, _ = report
    p: CalibratedProfile = rep.profile
    hw, o = apply_profile(p.datasheet, PlannerOptions(), p)
    best = p.best_tflops("bf16") or 0.0
    assert o.gemm_efficiency["bf16"] * hw.bf16_tflops == pytest.approx(best)
    assert o.hbm_bandwidth_gbps == p.hbm_bandwidth_gbps
    assert hw.intra_node_bandwidth_gbps == p.bus_gbps("all_reduce")
    assert hw.kernel_launch_us == p.kernel_launch_us != p.datasheet.kernel_launch_us
    assert sorted(o.gemm_measured["bf16"]) == sorted((g.m, g.n, g.k, g.tflops) for g in p.gemm if g.dtype == "bf16")
    assert o.foreach_optimizer_costs == (p.optimizer_us_per_tensor, p.optimizer_ns_per_param)
    old = p.model_copy(update={"kernel_launch_us": None})  # a profile from before the figure existed
    assert apply_profile(p.datasheet, PlannerOptions(), old)[0].kernel_launch_us == p.datasheet.kernel_launch_us


def test_workers_that_cannot_be_placed_end_in_an_error_not_a_hang(report) -> None:
    """More workers than the Ray cluster has CPUs: the wait for them ends after `timeout_s` with an
    error naming what was waited for, and the stored profile is left as it was."""
    import ray

    rep, store = report
    workers = int(ray.cluster_resources()["CPU"]) + 1
    with pytest.raises(CalibrationError, match=f"placing {workers} workers of .*did not finish within 5 s"):
        calibrate(load_platform("cpu"), workers, store, CalibrationSizes(), timeout_s=5)
    assert load_profile(store, "cpu") == rep.profile


def test_calibrate_command_is_registered(tmp_path: Path) -> None:
    from cli.main import build_parser

    args = build_parser().parse_args(["calibrate", "cpu", "--workers", "2", "--store", f"file://{tmp_path}"])
    assert args.platform == "cpu" and args.workers == 2 and args.func.__name__ == "cmd_calibrate"
