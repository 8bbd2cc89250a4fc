"""Where a pipeline runs: the platform descriptor (`configs/platforms/`) and the cluster
(`configs/clusters/`), as the user writes them (`day0.spec` re-exports every model here).

Contract: `UserModel` rules (`day0.spec.base`); every figure within a plausibility bound named in
its description (per-accelerator memory, peak TFLOP/s, bandwidths, node and accelerator counts,
timeouts), so nonsense is refused by `day0 validate`, never met by a step.
"""

from typing import Literal

from pydantic import Field, field_validator, model_validator

from day0.core.precision import DType
from day0.errors import UsageError
from day0.spec.base import BANDWIDTH_GBPS, MAX_ACCELERATORS, MAX_TIMEOUT_S, MEMORY_GIB, TFLOPS, Text, UserModel

__all__ = [
    "CALIBRATED_FIGURES",
    "PLANNER_FIGURES",
    "Accelerator",
    "ClusterSpec",
    "ElasticRange",
    "HardwareSpec",
    "HeadSpec",
    "LibraryOverlay",
    "LibraryOverride",
    "NodePool",
    "PlatformSpec",
    "PodEnvVar",
    "Toleration",
    "VendorLibrary",
]


_VERSION = r"^[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}$"
_PACKAGE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class LibraryOverlay(UserModel):
    overlay: Text = Field(pattern=_PACKAGE, description="The overlay's package, e.g. flag-gems.")
    version: Text = Field(pattern=_VERSION, description="Its version, e.g. 5.0.2.")
    vendor: Text = Field(pattern=r"^[a-z0-9_]{1,40}$", description="The overlay's backend for this chip, e.g. ascend.")


class LibraryOverride(UserModel):
    """A fact no package states, with its reason: the only way to declare an op by hand."""

    op: Text = Field(
        pattern=r"^[a-z_][a-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$",
        description="Operator, e.g. 'aten::_softmax' (default overload) or 'aten::add.Tensor'.",
    )
    dtypes: list[DType] | None = Field(None, description="The dtypes it is known to run at; omitted: unknown.")
    available: bool = Field(True, description="false withdraws an op the packages list.")
    reason: Text = Field(min_length=3, description="Why: the evidence (a test, a vendor document).")


class VendorLibrary(UserModel):
    """The operator library read from the vendor's packages (`day0.platforms.libraries`)."""

    package: Text | None = Field(
        None,
        pattern=_PACKAGE,
        description="The vendor's wheel whose operator registry is read, e.g. torch-npu; omitted only when "
        "overlays are given (a chip whose base plugin is not published).",
    )
    version: Text | None = Field(None, pattern=_VERSION, description="The package's version, e.g. 2.14.0.")
    overlays: list[LibraryOverlay] = Field(default=[], description="Kernel packages registered over the base.")
    overrides: list[LibraryOverride] = Field(default=[], description="Facts no package states, each with its reason.")

    @model_validator(mode="after")
    def _base_or_overlays(self) -> "VendorLibrary":
        if self.package is not None and self.version is None:
            raise ValueError("version: required with package")
        if self.package is None and self.version is not None:
            raise ValueError("package: required with version")
        if self.package is None and not self.overlays:
            raise ValueError("package: required unless overlays are given")
        return self


# What `day0 calibrate` measures of a platform's figures (its profile then replaces the datasheet's).
CALIBRATED_FIGURES = frozenset({"bf16_tflops", "fp8_tflops", "intra_node_bandwidth_gbps", "kernel_launch_us"})
# The figures the cost model cannot plan without (fp8's peak is optional: bf16's stands in).
PLANNER_FIGURES = (
    "memory_gib",
    "bf16_tflops",
    "intra_node_bandwidth_gbps",
    "inter_node_bandwidth_gbps",
    "kernel_launch_us",
)


class HardwareSpec(UserModel):
    """Per-accelerator figures, each within the bounds of `day0.spec.base` (named in each description).
    A figure nobody published is written `null`: the cost model then asks for it (`figure`), never
    assumes one."""

    memory_gib: float | None = Field(
        ge=MEMORY_GIB[0],
        le=MEMORY_GIB[1],
        description="Memory per accelerator, GiB (1 MiB to 64 TiB); null: not published (a node pool's "
        "accelerator.memory_gib then states it).",
    )
    bf16_tflops: float | None = Field(
        ge=TFLOPS[0],
        le=TFLOPS[1],
        description="Dense bf16 peak per accelerator, TFLOP/s (0.001 to 100,000); null: not published "
        "(`day0 calibrate` measures it).",
    )
    fp8_tflops: float | None = Field(
        None,
        ge=TFLOPS[0],
        le=TFLOPS[1],
        description="Dense fp8 peak per accelerator, TFLOP/s (0.001 to 100,000); null: no fp8 (or none published).",
    )
    intra_node_bandwidth_gbps: float | None = Field(
        ge=BANDWIDTH_GBPS[0],
        le=BANDWIDTH_GBPS[1],
        description="Per-accelerator intra-node bandwidth, per direction, GB/s (0.1, a gigabit link, to 100,000); "
        "null: not published (`day0 calibrate` measures it).",
    )
    inter_node_bandwidth_gbps: float | None = Field(
        ge=BANDWIDTH_GBPS[0],
        le=BANDWIDTH_GBPS[1],
        description="Per-accelerator inter-node bandwidth, per direction, GB/s (0.1, a gigabit link, to 100,000); "
        "null: not published (the cluster's NICs set it: state it).",
    )
    kernel_launch_us: float | None = Field(
        10.0,
        ge=0,
        le=100_000,
        description="Host time per op of eager training (dispatcher, autograd, launch), microseconds "
        "(PyTorch eager: ~5-10 on GPUs, ~10-30 on CPUs; at most 0.1 s); null: not published for this "
        "platform's stack (`day0 calibrate` measures it).",
    )
    launch_async: bool = Field(
        True, description="Kernels run asynchronously to the host (GPUs, NPUs): op dispatch hides behind device work."
    )

    def figure(self, name: str, platform: str = "PLATFORM") -> float:
        """The figure `name`, which the cost model needs: a `UsageError` naming it and how to get it when
        the platform file marks it unpublished (null)."""
        value = getattr(self, name)
        if value is None:
            how = (
                f"run `day0 calibrate {platform}` to measure it (the planner reads the stored profile), or state it"
                if name in CALIBRATED_FIGURES
                else "state it"
            )
            where = " (the planner also takes a node pool's accelerator.memory_gib)" if name == "memory_gib" else ""
            raise UsageError(
                f"platform {platform} hardware.{name}: not published (null in the platform file) and day0 "
                f"needs it: {how} under the platform's hardware:{where}"
            )
        return float(value)


class PlatformSpec(UserModel):
    name: Text = Field(description="Platform name, shown in reports.")
    device_type: Text = Field(description="torch device type: cpu, cuda, npu, musa ...")
    distributed_backend: Literal["gloo", "nccl", "hccl", "mccl", "xccl", "cncl"] = Field(
        "gloo", description="torch.distributed backend on this platform (cncl: Cambricon's torch_mlu)."
    )
    vendor_plugin: Text | None = Field(
        None, description="Entry point in group 'day0.platforms' that registers the device (e.g. torch_npu)."
    )
    hardware: HardwareSpec = Field(description="Per-accelerator figures the cost model uses.")
    operator_library: Literal["probe"] | VendorLibrary = Field(
        "probe",
        description="'probe' asks the dispatcher for kernels on the device; or the vendor's packages whose "
        "operator registries are read.",
    )
    resource: Text | None = Field(
        None,
        description="The Kubernetes extended resource one accelerator is (nvidia.com/gpu, huawei.com/Ascend910 "
        "...): what Ray is asked for (`GPU` for nvidia.com/gpu, else a custom resource named after its last "
        "part, as KubeRay pools advertise it). Omitted: nvidia.com/gpu on device type cuda, none on cpu; "
        "other device types name it.",
    )

    @model_validator(mode="after")
    def _resource_named(self) -> "PlatformSpec":
        if self.resource is None and self.device_type not in ("cpu", "cuda"):
            raise ValueError(
                f"resource: device type {self.device_type!r} needs the Kubernetes resource one accelerator is "
                "(e.g. huawei.com/Ascend910): Ray is asked for it"
            )
        return self

    def accelerator(self) -> str | None:
        """The Kubernetes resource one accelerator is (None: a CPU platform)."""
        if self.resource is not None:
            return self.resource
        return "nvidia.com/gpu" if self.device_type == "cuda" else None


class Accelerator(UserModel):
    resource: Text = Field("nvidia.com/gpu", description="Kubernetes extended resource name.")
    per_node: int = Field(ge=1, le=1024, description="Accelerators per node.")
    memory_gib: float = Field(
        ge=MEMORY_GIB[0], le=MEMORY_GIB[1], description="Memory per accelerator, GiB (1 MiB to 64 TiB)."
    )


class ElasticRange(UserModel):
    min: int = Field(0, ge=0, le=1_000_000, description="Fewest nodes the autoscaler keeps.")
    max: int = Field(ge=1, le=1_000_000, description="Most nodes the autoscaler may add.")

    @model_validator(mode="after")
    def _ordered(self) -> "ElasticRange":
        if self.min > self.max:
            raise ValueError(f"elastic.min ({self.min}) must be <= elastic.max ({self.max})")
        return self


class Toleration(UserModel):
    key: Text | None = Field(None, description="Taint key to tolerate (omit with operator Exists for all).")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists or Equal.")
    value: Text | None = Field(None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to tolerate (omit for all)."
    )


class NodePool(UserModel):
    name: Text = Field(
        pattern=r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$",
        description="Pool name (a DNS label): the RayCluster worker group's name.",
    )
    accelerator: Accelerator = Field(description="The accelerator each node carries.")
    nodes: int | None = Field(None, ge=0, le=1_000_000, description="Fixed node count (omit for elastic pools).")
    elastic: ElasticRange | None = Field(None, description="Elastic pool range, scaled by the Ray autoscaler.")
    cpus_per_node: int = Field(16, ge=1, le=65_536, description="CPUs per node (at most 65,536).")
    memory_gib_per_node: float = Field(
        256, ge=MEMORY_GIB[0], le=MEMORY_GIB[1], description="Host memory per node, GiB (1 MiB to 64 TiB)."
    )
    node_selector: dict[Text, Text] = Field(default={}, description="Kubernetes nodeSelector for the pool's pods.")
    tolerations: list[Toleration] = Field(
        default=[], description="Kubernetes tolerations for the pool's pods (e.g. tainted elastic nodes)."
    )
    ray_start_params: dict[Text, Text] = Field(
        default={},
        description="Extra `ray start` flags of this pool's workers (KubeRay rayStartParams), over the cluster's.",
    )

    @model_validator(mode="after")
    def _sized(self) -> "NodePool":
        if (self.nodes is None) == (self.elastic is None):
            raise ValueError("set exactly one of 'nodes' (fixed pool) or 'elastic' (elastic pool)")
        return self

    @property
    def max_nodes(self) -> int:
        if self.nodes is not None:
            return self.nodes
        assert self.elastic is not None  # _sized: exactly one of the two is set
        return self.elastic.max


class PodEnvVar(UserModel):
    """One environment variable of the Ray containers: a value, or a field of the pod (downward API)."""

    name: Text = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Variable name.")
    value: Text | None = Field(None, description="Literal value; `$(VAR)` names an earlier variable.")
    field_path: Text | None = Field(
        None, description="Pod field instead of a value (Kubernetes fieldRef), e.g. status.podIP or metadata.name."
    )

    @model_validator(mode="after")
    def _one_source(self) -> "PodEnvVar":
        if (self.value is None) == (self.field_path is None):
            raise ValueError("set exactly one of 'value' or 'field_path'")
        return self


class HeadSpec(UserModel):
    """Where the RayCluster's head pod runs (it takes no accelerator work: `num-cpus: 0`)."""

    node_selector: dict[Text, Text] = Field(default={}, description="Kubernetes nodeSelector of the head pod.")
    tolerations: list[Toleration] = Field(default=[], description="Tolerations of the head pod.")
    cpus: int = Field(2, ge=1, le=65_536, description="CPUs requested by the head pod.")
    memory_gib: int = Field(8, ge=1, le=65_536, description="Memory requested by the head pod, GiB.")


class ClusterSpec(UserModel):
    backend: Literal["local", "kuberay"] = Field(
        "local", description="'local' (Ray on this machine) or 'kuberay' (a RayCluster on Kubernetes)."
    )
    namespace: Text = Field(
        "day0",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="Kubernetes namespace of the run's RayCluster (kuberay): a namespace of the runs' own, never a "
        "system one (kube-system, kube-public, kube-node-lease, any kube-*, default).",
    )
    address: Text | None = Field(None, description="Existing Ray cluster address (local backend).")
    keep_cluster: bool = Field(False, description="Keep the RayCluster after the run (kuberay).")
    node_pools: list[NodePool] = Field(
        default=[],
        description="Accelerator node pools, fixed or elastic (kuberay, and the planner's cluster size).",
    )
    ready_timeout_s: float = Field(
        600, gt=0, le=MAX_TIMEOUT_S, description="Seconds to wait for the RayCluster to become ready (at most a week)."
    )
    head: HeadSpec = Field(default_factory=HeadSpec, description="The RayCluster's head pod (kuberay).")
    dashboard_via: Literal["service", "pod-ip"] = Field(
        "service",
        description="How the flow reaches the head's job API (kuberay): the head Service's DNS name (the flow "
        "runs in the cluster), or the head pod's IP (the flow's host routes to pod IPs).",
    )
    job_timeout_s: float = Field(
        7200,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Longest a step's Ray job may run before it is stopped (a week at most).",
    )
    job_resubmits: int = Field(
        2,
        ge=0,
        le=100,
        description="Times a step's Ray job is submitted again when its driver's node was lost (drivers run on "
        "worker pods): the trial resumes from its last checkpoint, the other steps start over.",
    )
    ray_start_params: dict[Text, Text] = Field(
        default={},
        description="Extra `ray start` flags of the head and every worker group (KubeRay rayStartParams, "
        "e.g. {node-ip-address: $(MY_POD_IP)} where Ray must advertise the pod's address); a pool's own win.",
    )
    pod_env: list[PodEnvVar] = Field(
        default=[],
        description="Environment of every Ray container (head, workers, autoscaler), e.g. MY_POD_IP from status.podIP.",
    )
    image: Text | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$",
        description="Image of the RayCluster's pods (kuberay): it must hold day0, since the steps' jobs run "
        "`python -m day0...` there (default: `day0:<day0's version>`, what `make image` builds).",
    )
    service_account: Text | None = Field(
        None,
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description="Kubernetes service account of the Ray pods (kuberay), one with no rights (the Helm chart makes "
        "one); its token is never mounted. Default: the namespace's default account, no token mounted either.",
    )
    store_secret: Text | None = Field(
        None,
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description="Kubernetes Secret (in `namespace`) with keys access-key-id and secret-access-key: the "
        "Ray containers read the store's credentials from it (secretKeyRef). The credentials never travel "
        "in a job's runtime env, metadata or command line; without it the pods use boto3's own chain "
        "(e.g. workload identity).",
    )

    @field_validator("namespace")
    @classmethod
    def _not_a_system_namespace(cls, namespace: str) -> str:
        # The runner gets pod-delete rights where its RayClusters run.
        if namespace.startswith("kube-") or namespace == "default":
            raise ValueError(f"{namespace!r} is a system namespace: runs need a namespace of their own")
        return namespace

    @model_validator(mode="after")
    def _plausible_size(self) -> "ClusterSpec":
        total = sum(p.max_nodes * p.accelerator.per_node for p in self.node_pools)
        if total > MAX_ACCELERATORS:
            raise ValueError(
                f"node_pools hold {total:,} accelerators at most; the largest cluster day0 plans for has "
                f"{MAX_ACCELERATORS:,} (the largest reported training clusters have ~200,000)"
            )
        return self
