"""The platform's calibrated profile: what `day0 calibrate PLATFORM` measured (GEMM TFLOP/s by shape and
dtype, memory bandwidth, collective bus bandwidth by message size) and how it replaces the datasheet
figures the cost model would otherwise assume.

Contract: pure data and pure functions (no torch, no I/O besides `load_profile`, which reads the store).
`apply_profile(hardware, options, profile)` returns the hardware and options the planner uses: each GEMM
dtype's measured rates by shape (`timing.measured_tflops` reads a GEMM's rate from them) and its roof
from the best one (the peak itself where the datasheet is exceeded or publishes none), the HBM bandwidth
measured, the intra-node link at the measured all-reduce bus bandwidth (collective efficiency then 1: the
figure is already achieved), the collective latency floor (the fastest all-reduce measured), the host time
per dispatched op and the foreach optimizer's costs measured. The datasheet stays beside it for the report.
A profile records who measured it, when and where (`Measurement`); `store_profile` writes it, moving the
profile it replaces to `calibration/<platform>/history/` (kept, and named in the new one's `replaced`).
"""

import json

from pydantic import BaseModel, ConfigDict, Field

from day0.errors import CorruptRecord
from day0.planner.inputs import PlannerOptions
from day0.spec.cluster import HardwareSpec
from day0.store import ArtifactStore

__all__ = [
    "CalibratedProfile",
    "CollectivePoint",
    "GemmPoint",
    "Measurement",
    "apply_profile",
    "load_profile",
    "profile_key",
    "store_profile",
]


class _Model(BaseModel):
    # built on first use: `day0 plan` imports this module on every run, a stored profile is the exception
    model_config = ConfigDict(extra="forbid", defer_build=True)


class GemmPoint(_Model):
    dtype: str
    m: int
    n: int
    k: int
    tflops: float = Field(
        description="Achieved TFLOP/s (median of repeats) as a training step runs the shape: a layer's forward "
        "and backward under autocast (fp8: a forward), net of the host's dispatch on synchronous platforms."
    )


class CollectivePoint(_Model):
    op: str = Field(description="all_reduce, all_gather or all_to_all")
    bytes: int = Field(description="Buffer bytes per rank.")
    seconds: float
    bus_gbps: float = Field(description="NCCL-tests bus bandwidth: algorithm bandwidth x (g-1)/g (x2 for all-reduce).")


class Measurement(_Model):
    """Who measured a profile, and where: what a plan built on it can be traced back to."""

    user: str = Field(description="The user that ran `day0 calibrate`.")
    host: str = Field(description="The host it ran on (the driver; the workers' hosts are `nodes`).")
    nodes: list[str] = Field(description="Hosts of the Ray workers that measured, one entry per host.")
    devices: list[str] = Field(description="The device each worker measured on, by name, one entry per worker.")
    day0_version: str


class CalibratedProfile(_Model):
    platform: str
    backend: str = Field(description="torch.distributed backend of the collectives (gloo, nccl, ...).")
    workers: int = Field(description="Ray workers the collectives ran across.")
    created: str
    datasheet: HardwareSpec
    gemm: list[GemmPoint]
    hbm_bandwidth_gbps: float = Field(
        description="Device memory copy bandwidth of the largest buffer measured (beyond the caches), GB/s."
    )
    collectives: list[CollectivePoint]
    collective_latency_us: float = Field(
        description="Latency floor: the fastest all-reduce of any size measured, microseconds."
    )
    kernel_launch_us: float | None = Field(
        None,
        description="Host time per op of a tiny forward + backward through autograd, microseconds "
        "(None: profiles written before it was measured; the datasheet figure stays).",
    )
    optimizer_us_per_tensor: float | None = Field(
        None, description="The trial's foreach clipping + AdamW step: microseconds per parameter tensor."
    )
    optimizer_ns_per_param: float | None = Field(
        None, description="The same step: nanoseconds per parameter element (None: profiles before it was measured)."
    )

    measured: Measurement | None = Field(
        None, description="Who measured it and where (None: profiles written before it was recorded)."
    )
    replaced: str | None = Field(
        None, description="URL of the profile this one replaced, kept in the platform's calibration history."
    )

    def describe(self) -> str:
        """The profile named for a plan: when, by whom, where and with what it was measured."""
        head = f"calibrated profile of {self.created} ({self.backend}, {self.workers} workers)"
        m = self.measured
        if m is None:
            return f"{head}, who measured it and where not recorded (written before day0 recorded them)"
        devices = ", ".join(f"{n} x {d}" for d, n in _counted(m.devices))
        return f"{head} measured by {m.user}@{m.host} on {', '.join(m.nodes)} ({devices}), day0 {m.day0_version}"

    def best_tflops(self, dtype: str) -> float | None:
        points = [p.tflops for p in self.gemm if p.dtype == dtype]
        return max(points) if points else None

    def bus_gbps(self, op: str) -> float | None:
        """The largest message's bus bandwidth of `op` (the asymptote the cost model's rings run at)."""
        points = [p for p in self.collectives if p.op == op]
        return max(points, key=lambda p: p.bytes).bus_gbps if points else None


def _counted(names: list[str]) -> list[tuple[str, int]]:
    """Each distinct name with how often it occurs, in first-seen order."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return list(counts.items())


def profile_key(platform: str) -> str:
    """Where the store keeps a platform's profile."""
    return f"calibration/{platform}/profile.json"


def apply_profile(
    hardware: HardwareSpec, options: PlannerOptions, profile: CalibratedProfile
) -> tuple[HardwareSpec, PlannerOptions]:
    """The hardware and options the planner uses once `profile` is known (see the module contract)."""
    hw_update: dict[str, float] = {}
    eff = dict(options.gemm_efficiency)
    measured = {dtype: profile.best_tflops(dtype) for dtype in ("bf16", "fp32", "fp8")}
    for dtype, peak_field in (("bf16", "bf16_tflops"), ("fp8", "fp8_tflops")):  # non-fp8 GEMMs share the bf16 roof
        value, datasheet = measured[dtype], getattr(hardware, peak_field)
        if value is not None and (datasheet is None or value > datasheet):
            hw_update[peak_field] = value  # none published, or the datasheet undersells it: the measurement is the roof
    for dtype, peak_field in (("bf16", "bf16_tflops"), ("fp32", "bf16_tflops"), ("fp8", "fp8_tflops")):
        value, peak = measured[dtype], hw_update.get(peak_field, getattr(hardware, peak_field))
        if value is not None and peak is not None:
            eff[dtype] = min(1.0, value / peak)
    if (bus := profile.bus_gbps("all_reduce")) is not None:
        hw_update["intra_node_bandwidth_gbps"] = bus
    if profile.kernel_launch_us is not None:
        hw_update["kernel_launch_us"] = profile.kernel_launch_us
    points: dict[str, list[tuple[int, int, int, float]]] = {}
    for g in profile.gemm:
        points.setdefault(g.dtype, []).append((g.m, g.n, g.k, g.tflops))
    foreach = (profile.optimizer_us_per_tensor, profile.optimizer_ns_per_param)
    opt_update = {
        "foreach_optimizer_costs": options.foreach_optimizer_costs if None in foreach else foreach,
        "gemm_efficiency": eff,
        "gemm_measured": points,
        "hbm_bandwidth_gbps": profile.hbm_bandwidth_gbps,
        "collective_latency_us": profile.collective_latency_us,
        "collective_efficiency": 1.0 if "intra_node_bandwidth_gbps" in hw_update else options.collective_efficiency,
        "profile": f"calibrated {profile.created}",
    }
    return hardware.model_copy(update=hw_update), options.model_copy(update=opt_update)


def load_profile(store: ArtifactStore, platform: str) -> CalibratedProfile | None:
    """The platform's calibrated profile in `store`, or None when there is none."""
    key = profile_key(platform)
    if not store.exists(key):
        return None
    try:
        return store.get_model(key, CalibratedProfile)
    except CorruptRecord as exc:
        raise exc.with_remedy(f"delete it, or run `day0 calibrate {platform}` again to replace it") from None


def store_profile(store: ArtifactStore, profile: CalibratedProfile) -> tuple[str, CalibratedProfile]:
    """Write `profile` as its platform's profile; the one it replaces (if any) is kept, byte for byte, at
    `calibration/<platform>/history/<its created time>.json` and named in the written one's `replaced`.
    Returns the key written and the profile as written."""
    key = profile_key(profile.platform)
    if store.exists(key):
        old = store.get_bytes(key)
        try:
            created = str(json.loads(old).get("created", ""))
        except (ValueError, AttributeError):  # not a profile: kept all the same, a person may still read it
            created = ""
        stamp = "".join(c for c in created if c.isalnum()) or "unknown"
        history, n = f"calibration/{profile.platform}/history/{stamp}.json", 1
        while store.exists(history):  # two profiles of one second: neither is overwritten
            n += 1
            history = f"calibration/{profile.platform}/history/{stamp}-{n}.json"
        # copied, then replaced in one write: a plan reading meanwhile finds one profile or the other
        profile = profile.model_copy(update={"replaced": store.put_bytes(history, old, "application/json")})
    store.put_json(key, profile.model_dump(mode="json"))
    return key, profile
