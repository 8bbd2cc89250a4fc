"""`calibrate`: the microbenchmarks on a platform's Ray workers, the profile they give, and the report.

from day0.calibration import calibrate
report = calibrate(load_platform("cpu"), workers=2, store=open_store("file://.day0"))
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

from pydantic import BaseModel, Field, field_validator

import day0
from day0.backends.resources import accelerator_resource, task_options
from day0.calibration import figures as fig
from day0.core.result import Judgement, Progress, StepResult
from day0.planner.profile import CalibratedProfile, CollectivePoint, GemmPoint, Measurement, store_profile
from day0.spec.cluster import PlatformSpec
from day0.store import ArtifactStore

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = ["CalibrationError", "CalibrationReport", "CalibrationSizes", "calibrate"]

COLLECTIVES = ("all_reduce", "all_gather", "all_to_all")


class CalibrationSizes(BaseModel):
    """What to measure; the defaults finish in well under two minutes on a 2-core CPU."""

    gemm: list[tuple[int, int, int]] = Field(
        default_factory=lambda: [
            (32, 256, 256),
            (128, 128, 128),
            (128, 256, 256),
            (32, 1024, 1024),
            (128, 1024, 1024),
            (512, 512, 512),
            (2048, 512, 512),
        ],
        description="(m, n, k) GEMM shapes, m the token rows: from a small expert's few rows to the asymptote.",
    )
    dtypes: list[str] = Field(default_factory=lambda: ["fp32", "bf16", "fp8"])
    copy_bytes: list[int] = Field(default_factory=lambda: [1 << 22, 1 << 26], description="Memory copy sizes.")
    message_bytes: list[int] = Field(
        default_factory=lambda: [1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 24],
        description="Collective buffer sizes per rank (the largest: a small model's gradients).",
    )
    optimizer_params: int = Field(1 << 22, description="Elements of the optimizer-step timings.")
    optimizer_tensors: tuple[int, int] = Field(
        (4, 256), description="Tensors the elements are split over in the two optimizer-step timings."
    )
    repeats: int = Field(5, ge=1)
    dispatch_steps: int = Field(10, ge=1, description="Tiny training passes per host-dispatch timing.")

    @field_validator("optimizer_tensors")
    @classmethod
    def _fewer_then_more(cls, value: tuple[int, int]) -> tuple[int, int]:
        few, many = value
        if not 1 <= few < many:  # the per-tensor cost is read from their difference
            raise ValueError(f"needs 1 <= first < second tensor count, got {value}")
        return value

    @classmethod
    def for_device(cls, device_type: str) -> CalibrationSizes:
        """GPU-sized defaults on accelerators (large GEMMs and messages reach the asymptote)."""
        if device_type == "cpu":
            return cls()
        return cls(
            gemm=[(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 1024, 8192), (256, 8192, 8192)],
            copy_bytes=[1 << 26, 1 << 30],
            message_bytes=[1 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 28],
            repeats=10,
        )


class FigureRow(BaseModel):
    figure: str
    datasheet: float | None
    calibrated: float | None
    unit: str


class CalibrationReport(StepResult):
    """What `day0 calibrate` measured and stored; also the result of step 3's calibration sub-step
    (`planner.calibrate: true`), which a resumed run reuses instead of measuring again."""

    STEP = "calibrate"

    profile: CalibratedProfile
    store_key: str
    seconds: float

    def judge(self) -> Judgement:
        return Judgement(verdict="pass", headline={"calibrated": f"{self.profile.platform} in {self.seconds:.0f} s"})

    def rows(self) -> list[FigureRow]:
        p, hw = self.profile, self.profile.datasheet
        return [
            FigureRow(
                figure="bf16 GEMM peak", datasheet=hw.bf16_tflops, calibrated=p.best_tflops("bf16"), unit="TFLOP/s"
            ),
            FigureRow(figure="fp32 GEMM", datasheet=None, calibrated=p.best_tflops("fp32"), unit="TFLOP/s"),
            FigureRow(figure="fp8 GEMM peak", datasheet=hw.fp8_tflops, calibrated=p.best_tflops("fp8"), unit="TFLOP/s"),
            FigureRow(figure="memory bandwidth", datasheet=None, calibrated=p.hbm_bandwidth_gbps, unit="GB/s"),
            *[
                FigureRow(
                    figure=f"{op.replace('_', '-')} bus bandwidth",
                    datasheet=hw.intra_node_bandwidth_gbps,
                    calibrated=p.bus_gbps(op),
                    unit="GB/s",
                )
                for op in COLLECTIVES
            ],
            FigureRow(figure="collective latency", datasheet=None, calibrated=p.collective_latency_us, unit="us"),
            FigureRow(
                figure="host time per op (fwd+bwd)",
                datasheet=hw.kernel_launch_us,
                calibrated=p.kernel_launch_us,
                unit="us",
            ),
            FigureRow(
                figure="foreach AdamW step, per tensor",
                datasheet=None,
                calibrated=p.optimizer_us_per_tensor,
                unit="us",
            ),
            FigureRow(
                figure="foreach AdamW step, per element",
                datasheet=None,
                calibrated=p.optimizer_ns_per_param,
                unit="ns",
            ),
        ]

    def to_markdown(self) -> str:
        p = self.profile
        lines = [
            f"# Calibration of `{p.platform}` ({p.backend}, {p.workers} workers, {self.seconds:.0f} s)",
            "",
            "| figure | datasheet | calibrated | unit |",
            "|---|---:|---:|---|",
        ]
        lines += [f"| {r.figure} | {_fmt(r.datasheet)} | {_fmt(r.calibrated)} | {r.unit} |" for r in self.rows()]
        lines += [
            "",
            "GEMMs as a layer's forward + backward runs them (3 per shape), net of the host's dispatch:",
        ]
        lines += ["", "| GEMM dtype | m | n | k | TFLOP/s |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {g.dtype} | {g.m} | {g.n} | {g.k} | {g.tflops:.4g} |" for g in p.gemm]
        lines += ["", "| collective | bytes/rank | seconds | bus GB/s |", "|---|---:|---:|---:|"]
        lines += [f"| {c.op} | {c.bytes} | {c.seconds:.3g} | {c.bus_gbps:.4g} |" for c in p.collectives]
        lines += ["", f"profile written to `{self.store_key}`; `day0 plan` uses it for platform `{p.platform}`"]
        replaced = f"; it replaces the profile now kept at `{p.replaced}`" if p.replaced else ""
        lines += ["", p.describe() + replaced]
        return "\n".join(lines) + "\n"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


class CalibrationError(RuntimeError):
    """A microbenchmark that did not finish in time (workers not placed, a collective stuck)."""


R = TypeVar("R")
# A Ray actor handle of `day0.calibration.kernels.Worker`: ray types `handle.method` as the plain
# method (no `.remote`), so calls through a handle are untyped.
WorkerHandle: TypeAlias = Any


@overload
def _get(refs: ObjectRef[R], what: str, timeout_s: float) -> R: ...
@overload
def _get(refs: Sequence[ObjectRef[R]], what: str, timeout_s: float) -> list[R]: ...
def _get(refs: ObjectRef[R] | Sequence[ObjectRef[R]], what: str, timeout_s: float) -> R | list[R]:
    """`ray.get` that ends after `timeout_s` with an error naming what was waited for."""
    import ray
    from ray.exceptions import GetTimeoutError

    from day0.backends.local.ray import interruptible

    try:
        with interruptible():
            return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        free = {k: v for k, v in ray.available_resources().items() if not k.startswith("node:")}
        raise CalibrationError(
            f"calibration: {what} did not finish within {timeout_s:.0f} s (Ray resources free now: {free})"
        ) from None


def _local_ray(platform: PlatformSpec, workers: int, say: Progress) -> None:
    """Start a private local Ray advertising this host's devices as the platform's Ray resource (Ray
    detects NVIDIA GPUs itself; a custom resource, `Ascend910`, is what this host's torch counts).
    With fewer devices than `workers` (by torch's count before Ray starts, then by Ray's) it refuses
    at once: nothing would ever be placed."""
    import ray

    from day0.backends.local.ray import connect
    from day0.platforms.kernels import device_count

    resource = accelerator_resource(platform)
    devices = None if resource is None else device_count(platform.device_type)
    if devices is not None and devices < workers:
        raise _no_devices(platform, workers, resource, devices)
    custom = {resource: float(devices)} if resource not in (None, "GPU") and devices is not None else None
    say(f"starting a local Ray{f' with {devices} {resource!r}' if custom else ''}")
    connect(None, resources=custom)
    if resource is not None and (have := ray.cluster_resources().get(resource, 0.0)) < workers:
        raise _no_devices(platform, workers, resource, have)


def _no_devices(platform: PlatformSpec, workers: int, resource: str | None, have: float) -> CalibrationError:
    return CalibrationError(
        f"calibrate {platform.name}: this host has {have:g} {platform.device_type} device(s) (Ray resource "
        f"{resource!r}, from platform.resource {platform.accelerator()!r}) and {workers} worker(s) need one "
        "each; nothing was measured: run it where the devices are, or give --address of a Ray cluster "
        "that has them"
    )


def calibrate(
    platform: PlatformSpec,
    workers: int,
    store: ArtifactStore,
    sizes: CalibrationSizes | None = None,
    address: str | None = None,
    timeout_s: float = 300.0,
    progress: Progress | None = None,
) -> CalibrationReport:
    """Measure, write the profile to `store`, and report (see the package contract), saying each
    stage to `progress`. On a local Ray without the platform's devices it ends at once with a
    `CalibrationError`; each wait on the workers (placement on a cluster, one microbenchmark, the
    group's rendezvous and collectives) ends after `timeout_s` with one."""
    import ray

    from day0.backends.local.ray import connect
    from day0.calibration.kernels import Worker

    say = progress or (lambda _msg: None)
    t0, sizes = time.perf_counter(), sizes or CalibrationSizes.for_device(platform.device_type)
    if address is None:
        _local_ray(platform, workers, say)
    else:
        say(f"connecting to the Ray cluster at {address}")
        connect(address)
    options = task_options(platform)
    actor = ray.remote(Worker).options(**options)
    say(f"placing {workers} worker(s), each asking Ray for {options}")
    pool: list[WorkerHandle] = [actor.remote(platform.device_type) for _ in range(workers)]
    try:
        _get([w.__ray_ready__.remote() for w in pool], f"placing {workers} workers of {options}", timeout_s)
        where = _get([w.where.remote() for w in pool], "asking the workers where they run", timeout_s)
        say("measuring: host time per op")
        runs = _together(pool, "host dispatch timing", timeout_s, "dispatch", sizes.dispatch_steps, 3 * sizes.repeats)
        ops = runs[0][1]
        launch_us = fig.microseconds_per_op(max(fig.median_seconds(r[0]) for r in runs) / sizes.dispatch_steps, ops)
        # a CPU dispatches its own ops between the GEMMs; an accelerator's host runs ahead of them
        host_us = 0.0 if platform.hardware.launch_async else launch_us
        gemm = _gemms(pool, sizes, host_us, timeout_s, say)
        say("measuring: the optimizer step, memory copies")
        elements = sizes.optimizer_params
        few, many = (
            (t, _slowest(_together(pool, f"{t}-tensor AdamW", timeout_s, "optimizer", t, elements, 3 * sizes.repeats)))
            for t in sizes.optimizer_tensors
        )
        per_tensor_us, per_param_ns = fig.optimizer_costs(few, many, elements)
        copies = {
            b: fig.copy_gbps(b, _slowest(_together(pool, f"copy of {b} bytes", timeout_s, "copy", b, sizes.repeats)))
            for b in sizes.copy_bytes
        }
        if workers > 1:
            say(f"measuring: collectives over {workers} workers ({platform.distributed_backend})")
        collectives = _collectives(pool, platform.distributed_backend, sizes, timeout_s) if workers > 1 else []
        _get([w.leave.remote() for w in pool], "leaving the process group", timeout_s)
    finally:
        for w in pool:
            ray.kill(w)
    # the latency floor: no all-reduce, of any size, took less (a tiny one alone is at the mercy of a stall)
    smallest = sorted(c.seconds for c in collectives if c.op == "all_reduce")[:1]
    profile = CalibratedProfile(
        platform=platform.name,
        backend=platform.distributed_backend,
        workers=workers,
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        datasheet=platform.hardware,
        gemm=gemm,
        hbm_bandwidth_gbps=copies[max(copies)],  # the largest buffer: the streaming asymptote, not a cache
        collectives=collectives,
        collective_latency_us=(smallest[0] * 1e6) if smallest else 0.0,
        kernel_launch_us=launch_us,
        optimizer_us_per_tensor=per_tensor_us,
        optimizer_ns_per_param=per_param_ns,
        measured=Measurement(
            user=_user(),
            host=socket.gethostname(),
            nodes=sorted({host for host, _ in where}),
            devices=[device for _, device in where],
            day0_version=day0.__version__,
        ),
    )
    key, profile = store_profile(store, profile)
    if profile.replaced:
        say(f"the profile it replaces is kept at {profile.replaced}")
    return CalibrationReport(profile=profile, store_key=key, seconds=time.perf_counter() - t0)


def _user() -> str:
    """Who runs this: the login name, else the uid (a container may have no passwd entry for it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


def _together(pool: list[WorkerHandle], what: str, timeout_s: float, method: str, *args: int | str) -> list[Any]:
    """`method(*args)` on every worker at once, as a data-parallel step runs them (sharing the host's
    memory bandwidth, caches and cores), so a figure is what each worker gets while all are busy.
    Untyped: what `method` returns through a `WorkerHandle`."""
    return _get([getattr(w, method).remote(*args) for w in pool], what, timeout_s)


def _slowest(samples_per_worker: list[list[float]]) -> float:
    """The slowest worker's median: a synchronous step waits for it."""
    return max(fig.median_seconds(s) for s in samples_per_worker)


def _gemms(
    pool: list[WorkerHandle], sizes: CalibrationSizes, host_us: float, timeout_s: float, say: Progress
) -> list[GemmPoint]:
    """Each dtype's GEMM rate by shape, net of `host_us` of host time per op dispatched around them."""
    out = []
    for dtype in sizes.dtypes:
        say(f"measuring: {dtype} GEMMs, {len(sizes.gemm)} shapes")
        for m, n, k in sizes.gemm:
            runs = _together(pool, f"{dtype} GEMM {m}x{n}x{k}", timeout_s, "gemm", dtype, m, n, k, sizes.repeats)
            if runs[0] is None:  # the device has no GEMM at this dtype (fp8 on a CPU)
                break
            _, ops, gemms = runs[0]
            seconds = _slowest([r[0] for r in runs])
            tflops = fig.gemm_tflops(m, n, k, seconds, gemms, ops * host_us * 1e-6)
            out.append(GemmPoint(dtype=dtype, m=m, n=n, k=k, tflops=tflops))
    return out


def _collectives(
    pool: list[WorkerHandle], backend: str, sizes: CalibrationSizes, timeout_s: float
) -> list[CollectivePoint]:
    world = len(pool)
    host, port = _get(pool[0].host_store.remote(world, timeout_s), "opening the group's rendezvous", timeout_s)
    joins = [w.join.remote(backend, host, port, rank, world, timeout_s) for rank, w in enumerate(pool)]
    _get(joins, f"{world} workers joining a {backend} group at {host}:{port}", timeout_s)
    out = []
    for op in COLLECTIVES:
        for nbytes in sizes.message_bytes:
            per_rank = _get(
                [w.collective.remote(op, nbytes, sizes.repeats) for w in pool], f"{op} of {nbytes} bytes", timeout_s
            )
            seconds = max(fig.median_seconds(s) for s in per_rank)  # the slowest rank ends the collective
            out.append(
                CollectivePoint(op=op, bytes=nbytes, seconds=seconds, bus_gbps=fig.bus_gbps(op, nbytes, world, seconds))
            )
    return out
