"""The declarative pipeline spec (`apiVersion: day0/v1`, `kind: AdaptationPipeline`).

Contract: everything a user writes is validated here with `extra="forbid"`; named references
(`platform: cpu`, `cluster: local`, `model: tiny-deepseek-v3`) resolve against `configs/`.
`load_spec` raises `SpecError` listing *every* problem with file, field path and expectation.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from day0.core.precision import COMPUTE_DTYPES, DEFAULT_TOLERANCES, DType
from day0.errors import SpecError, SpecIssue, StoreError, shorten
from day0.paths import CONFIGS_DIR, config_dirs
from day0.store import parse_store_uri
from day0.yamlio import read_user_yaml

__all__ = [
    "SLO",
    "STEPS",
    "Accelerator",
    "BenchmarkSpec",
    "ClusterSpec",
    "ElasticRange",
    "InferenceSpec",
    "Metadata",
    "ModelSpec",
    "NodePool",
    "ParallelConstraints",
    "PipelineSpec",
    "PlannerOverlap",
    "PlannerSpec",
    "PlatformSpec",
    "PodEnvVar",
    "Precision",
    "QualityTolerance",
    "TrainingSpec",
    "TrialSpec",
    "ValidationSpec",
    "hub_reference",
    "load_platform",
    "load_spec",
    "load_yaml",
    "spec_from_dict",
]

Step = Literal["analyze", "operators", "parallel", "optimize", "trial", "inference"]
STEPS: tuple[Step, ...] = get_args(Step)


class _UserModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


class Metadata(_UserModel):
    name: str = Field(
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="Run name: lowercase letters, digits and dashes (a DNS label).",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels copied into the run's records.")


class ModelSpec(_UserModel):
    source: str = Field(
        description="A name in configs/models/, a local dir with config.json, or hf://org/name[@revision]."
    )
    trust_remote_code: bool = Field(False, description="Allow the repo's own modelling code.")
    trusted_orgs: list[str] = Field(
        default_factory=list, description="Orgs whose remote code may run when trust_remote_code is on."
    )

    @field_validator("source")
    @classmethod
    def _hub_reference_well_formed(cls, source: str) -> str:
        if source.startswith("hf://"):
            hub_reference(source)
        return source


class OperatorSupport(_UserModel):
    op: str = Field(description="aten operator, e.g. 'aten::mm' or 'aten::_grouped_mm'.")
    dtypes: list[DType] | None = Field(None, description="Supported dtypes; omitted means all.")


class HardwareSpec(_UserModel):
    memory_gib: float = Field(gt=0, description="Memory per accelerator, GiB.")
    bf16_tflops: float = Field(gt=0, description="Dense bf16 peak per accelerator, TFLOP/s.")
    fp8_tflops: float | None = Field(None, gt=0, description="Dense fp8 peak per accelerator, TFLOP/s.")
    intra_node_bandwidth_gbps: float = Field(gt=0, description="Per-accelerator intra-node bandwidth, GB/s.")
    inter_node_bandwidth_gbps: float = Field(gt=0, description="Per-accelerator inter-node bandwidth, GB/s.")
    kernel_launch_us: float = Field(
        10.0,
        ge=0,
        description="Host time per op of eager training (dispatcher, autograd, launch), microseconds "
        "(PyTorch eager: ~5-10 on GPUs, ~10-30 on CPUs).",
    )
    launch_async: bool = Field(
        True, description="Kernels run asynchronously to the host (GPUs, NPUs): op dispatch hides behind device work."
    )


class PlatformSpec(_UserModel):
    name: str = Field(description="Platform name, shown in reports.")
    device_type: str = Field(description="torch device type: cpu, cuda, npu, musa ...")
    distributed_backend: Literal["gloo", "nccl", "hccl", "mccl", "xccl"] = Field(
        "gloo", description="torch.distributed backend on this platform."
    )
    vendor_plugin: str | None = Field(
        None, description="Entry point in group 'day0.platforms' that registers the device (e.g. torch_npu)."
    )
    hardware: HardwareSpec = Field(description="Per-accelerator figures the cost model uses.")
    operator_library: Literal["probe"] | list[OperatorSupport] = Field(
        "probe",
        description="'probe' asks the dispatcher for kernels on the device; or a declared list of supported operators.",
    )


class Accelerator(_UserModel):
    resource: str = Field("nvidia.com/gpu", description="Kubernetes extended resource name.")
    per_node: int = Field(ge=1, le=1024, description="Accelerators per node.")
    memory_gib: float = Field(gt=0, description="Memory per accelerator, GiB.")


class ElasticRange(_UserModel):
    min: int = Field(0, ge=0, description="Fewest nodes the autoscaler keeps.")
    max: int = Field(ge=1, le=1_000_000, description="Most nodes the autoscaler may add.")

    @model_validator(mode="after")
    def _ordered(self) -> ElasticRange:
        if self.min > self.max:
            raise ValueError(f"elastic.min ({self.min}) must be <= elastic.max ({self.max})")
        return self


class Toleration(_UserModel):
    key: str | None = Field(None, description="Taint key to tolerate (omit with operator Exists for all).")
    operator: Literal["Exists", "Equal"] = Field("Equal", description="Exists or Equal.")
    value: str | None = Field(None, description="Taint value (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to tolerate (omit for all)."
    )


class NodePool(_UserModel):
    name: str = Field(
        pattern=r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$",
        description="Pool name (a DNS label): the RayCluster worker group's name.",
    )
    accelerator: Accelerator = Field(description="The accelerator each node carries.")
    nodes: int | None = Field(None, ge=0, le=1_000_000, description="Fixed node count (omit for elastic pools).")
    elastic: ElasticRange | None = Field(None, description="Elastic pool range, scaled by the Ray autoscaler.")
    cpus_per_node: int = Field(16, ge=1, description="CPUs per node.")
    memory_gib_per_node: float = Field(256, gt=0, description="Host memory per node, GiB.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Kubernetes nodeSelector for the pool's pods."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Kubernetes tolerations for the pool's pods (e.g. tainted elastic nodes)."
    )
    ray_start_params: dict[str, str] = Field(
        default_factory=dict,
        description="Extra `ray start` flags of this pool's workers (KubeRay rayStartParams), over the cluster's.",
    )

    @model_validator(mode="after")
    def _sized(self) -> NodePool:
        if (self.nodes is None) == (self.elastic is None):
            raise ValueError("set exactly one of 'nodes' (fixed pool) or 'elastic' (elastic pool)")
        return self

    @property
    def max_nodes(self) -> int:
        if self.nodes is not None:
            return self.nodes
        assert self.elastic is not None  # _sized: exactly one of the two is set
        return self.elastic.max


class PodEnvVar(_UserModel):
    """One environment variable of the Ray containers: a value, or a field of the pod (downward API)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Variable name.")
    value: str | None = Field(None, description="Literal value; `$(VAR)` names an earlier variable.")
    field_path: str | None = Field(
        None, description="Pod field instead of a value (Kubernetes fieldRef), e.g. status.podIP or metadata.name."
    )

    @model_validator(mode="after")
    def _one_source(self) -> PodEnvVar:
        if (self.value is None) == (self.field_path is None):
            raise ValueError("set exactly one of 'value' or 'field_path'")
        return self


class HeadSpec(_UserModel):
    """Where the RayCluster's head pod runs (it takes no accelerator work: `num-cpus: 0`)."""

    node_selector: dict[str, str] = Field(default_factory=dict, description="Kubernetes nodeSelector of the head pod.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Tolerations of the head pod.")
    cpus: int = Field(2, ge=1, description="CPUs requested by the head pod.")
    memory_gib: int = Field(8, ge=1, description="Memory requested by the head pod, GiB.")


class ClusterSpec(_UserModel):
    backend: Literal["local", "kuberay"] = Field(
        "local", description="'local' (Ray on this machine) or 'kuberay' (a RayCluster on Kubernetes)."
    )
    namespace: str = Field("day0", description="Kubernetes namespace of the run's RayCluster (kuberay).")
    address: str | None = Field(None, description="Existing Ray cluster address (local backend).")
    keep_cluster: bool = Field(False, description="Keep the RayCluster after the run (kuberay).")
    node_pools: list[NodePool] = Field(
        default_factory=list,
        description="Accelerator node pools, fixed or elastic (kuberay, and the planner's cluster size).",
    )
    ready_timeout_s: float = Field(600, gt=0, description="Seconds to wait for the RayCluster to become ready.")
    head: HeadSpec = Field(default_factory=HeadSpec, description="The RayCluster's head pod (kuberay).")
    dashboard_via: Literal["service", "pod-ip"] = Field(
        "service",
        description="How the flow reaches the head's job API (kuberay): the head Service's DNS name (the flow "
        "runs in the cluster), or the head pod's IP (the flow's host routes to pod IPs).",
    )
    job_timeout_s: float = Field(7200, gt=0, description="Longest a step's Ray job may run before it is stopped.")
    ray_start_params: dict[str, str] = Field(
        default_factory=dict,
        description="Extra `ray start` flags of the head and every worker group (KubeRay rayStartParams, "
        "e.g. {node-ip-address: $(MY_POD_IP)} where Ray must advertise the pod's address); a pool's own win.",
    )
    pod_env: list[PodEnvVar] = Field(
        default_factory=list,
        description="Environment of every Ray container (head, workers, autoscaler), e.g. MY_POD_IP from status.podIP.",
    )


class Precision(_UserModel):
    compute: DType = Field("bf16", description="Compute dtype of matmuls and activations.")
    master_weights: Literal["fp32", "bf16"] = Field("fp32", description="Dtype of the optimizer's master weights.")


class TrainingSpec(_UserModel):
    seq_len: int = Field(4096, ge=1, le=100_000_000, description="Sequence length, tokens.")
    global_batch: int = Field(1024, ge=1, le=1_000_000_000, description="Sequences per optimizer step.")
    micro_batch: int = Field(1, ge=1, description="Sequences per micro-batch per data-parallel rank.")
    precision: Precision = Field(default_factory=Precision, description="Compute and master-weight dtypes.")


class ParallelConstraints(_UserModel):
    tensor_parallel: int | None = Field(None, ge=1, description="Fixed tensor-parallel degree.")
    pipeline_parallel: int | None = Field(None, ge=1, description="Fixed pipeline-parallel degree.")
    expert_parallel: int | None = Field(None, ge=1, description="Fixed expert-parallel degree.")
    context_parallel: int | None = Field(None, ge=1, description="Fixed context-parallel degree.")
    data_parallel: int | None = Field(None, ge=1, description="Fixed data-parallel degree.")
    max_pipeline_parallel: int | None = Field(
        None, ge=1, description="Largest pipeline-parallel degree the search may pick."
    )
    accelerators: int | None = Field(None, ge=1, description="Use this many accelerators (default: all).")


class TrialScale(_UserModel):
    layers: int | None = Field(None, ge=1, le=1024, description="Decoder layers of the scaled-down trial model.")
    hidden: int | None = Field(None, ge=8, le=131_072, description="Hidden size of the scaled-down trial model.")
    experts: int | None = Field(None, ge=1, le=65_536, description="Routed experts of the scaled-down trial model.")


class TrialTolerance(_UserModel):
    """When two loss curves are aligned (the one model: `day0.trial.alignment` judges by it).
    Limits follow public practice (mean relative error < 2% from step 21 on); the thresholds
    judged are tighter when the reference's own seed-to-seed spread says so (`noise_fraction`)."""

    loss_mean_rel: float = Field(0.02, gt=0, description="Limit of the mean relative loss error after warm-up.")
    grad_norm_median_rel: float = Field(
        0.25, gt=0, description="Limit of the median relative gradient-norm error after warm-up."
    )
    noise_fraction: float | None = Field(
        0.25,
        gt=0,
        le=1,
        description="Share of the reference's seed-to-seed spread (estimated from its own step-to-step residual) "
        "the candidate may drift; null: the limits alone.",
    )
    first_step_abs: float = Field(0.005, gt=0, description="First-step absolute loss difference.")
    first_step_rel: float = Field(
        0.005, gt=0, description="First-step relative loss difference (either bound passing is enough)."
    )
    warmup_steps: int = Field(20, ge=0, description="Leading steps excluded from the mean error.")


class TrialSpec(_UserModel):
    scale: TrialScale = Field(
        default_factory=TrialScale, description="How the trial model is scaled down (same architecture)."
    )
    steps: int = Field(50, ge=1, le=10_000_000, description="Optimizer steps of each trial training.")
    workers: int = Field(1, ge=1, le=4096, description="Data-parallel workers of the candidate.")
    seq_len: int = Field(128, ge=8, le=1_000_000, description="Trial sequence length, tokens.")
    micro_batch: int = Field(4, ge=1, description="Sequences per worker per step.")
    learning_rate: float = Field(3e-4, gt=0, description="Peak learning rate (AdamW, linear warm-up).")
    checkpoint_every: int = Field(10, ge=1, description="Steps between checkpoints (resume and recovery points).")
    seed: int = Field(0, description="Seed of weights and data order, shared by reference and candidate.")
    reference: str = Field("cpu-fp32", description="'cpu-fp32' or a store URI of a saved curve.")
    dataset: str | None = Field(None, description="Text file path/URI; default: pydoc_data.topics.")
    tolerance: TrialTolerance = Field(
        default_factory=TrialTolerance, description="When the two loss curves count as aligned."
    )


class SLO(_UserModel):
    """Serving targets, judged on the heaviest load of the benchmark sweep (vLLM `bench serve` definitions)."""

    ttft_p99_ms: float = Field(2000, gt=0, le=3_600_000, description="Time to first token, 99th percentile, ms.")
    tpot_p99_ms: float = Field(100, gt=0, le=3_600_000, description="Time per output token, 99th percentile, ms.")
    min_throughput_tok_s: float | None = Field(
        None, gt=0, description="Least output throughput at the best sweep point, tokens/s."
    )


class QualityTolerance(_UserModel):
    """How far the quantised model may drift from the unquantised one on held-out text."""

    max_perplexity_increase: float = Field(
        0.02, gt=0, le=10, description="Largest relative perplexity increase (0.02 = +2%)."
    )
    min_token_agreement: float = Field(
        0.9, gt=0, le=1, description="Least share of greedy next tokens equal to the unquantised model's."
    )


class BenchmarkSpec(_UserModel):
    """The load client's workload: vLLM `bench serve`'s random dataset and arrival process."""

    requests: int = Field(16, ge=1, le=1_000_000, description="Measured requests per sweep point.")
    warmup_requests: int = Field(2, ge=0, le=10_000, description="Requests sent first and not measured.")
    input_len: int = Field(64, ge=1, le=1_000_000, description="Mean prompt length, tokens.")
    output_len: int = Field(32, ge=2, le=1_000_000, description="Mean output length (max_tokens), tokens.")
    range_ratio: float = Field(
        0.0, ge=0, lt=1, description="Lengths are uniform in [len x (1 - r), len x (1 + r)] (vLLM's range ratio)."
    )
    concurrency: list[Annotated[int, Field(ge=1, le=100_000)]] = Field(
        default_factory=lambda: [1, 4], min_length=1, description="Sweep: most requests in flight at each point."
    )
    request_rate: float | None = Field(
        None, gt=0, description="Arrivals per second (gamma process); omit to send as fast as concurrency allows."
    )
    burstiness: float = Field(1.0, gt=0, description="Gamma shape of arrivals: 1 is Poisson, < 1 burstier.")
    timeout_s: float = Field(300, gt=0, description="Longest wait for one request, s.")
    seed: int = Field(0, description="Seed of prompt sampling, lengths and arrivals.")


class InferenceSpec(_UserModel):
    engine: Literal["auto", "transformers", "vllm", "sglang"] = Field(
        "auto", description="Serving engine; 'auto' picks by platform."
    )
    quantization: Literal["none", "int8-weight", "fp8"] = Field(
        "none", description="Weight quantisation of the served model."
    )
    max_batch: int = Field(8, ge=1, description="Most concurrent sequences served (the sweep's upper bound).")
    context_len: int = Field(
        4096, ge=16, le=10_000_000, description="Target context per sequence for the KV budget, tokens."
    )
    cache_blocks: int = Field(
        64, ge=1, le=10_000_000, description="Paged KV cache blocks given to the engine (always bounded)."
    )
    block_size: int = Field(32, ge=1, le=4096, description="Tokens per paged KV cache block.")
    max_batch_tokens: int = Field(512, ge=16, le=1_000_000, description="Most tokens per engine step.")
    startup_timeout_s: float = Field(300, gt=0, description="Longest wait for the server to answer /health, s.")
    slo: SLO = Field(default_factory=SLO, description="Latency and throughput targets.")
    quality: QualityTolerance = Field(default_factory=QualityTolerance, description="Quantisation quality tolerance.")
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec, description="The load benchmark.")

    @model_validator(mode="after")
    def _sweep_within_batch(self) -> InferenceSpec:
        over = [c for c in self.benchmark.concurrency if c > self.max_batch]
        if over:
            raise ValueError(f"benchmark.concurrency {over} exceeds max_batch ({self.max_batch})")
        return self


class DTypeTolerance(_UserModel):
    rtol: float = Field(gt=0, description="Relative tolerance.")
    atol: float = Field(gt=0, description="Absolute tolerance.")


def _default_tolerances() -> dict[DType, DTypeTolerance]:
    """The shared defaults (torch.testing.assert_close's) for the compute dtypes that have one."""
    return {
        d: DTypeTolerance(rtol=rtol, atol=atol) for d, (rtol, atol) in DEFAULT_TOLERANCES.items() if d in COMPUTE_DTYPES
    }


class ValidationSpec(_UserModel):
    tolerances: dict[DType, DTypeTolerance] = Field(
        default_factory=_default_tolerances,
        description="Per-dtype (rtol, atol); default: torch.testing.assert_close's.",
    )
    min_cosine: float = Field(0.99, gt=0, le=1, description="Least cosine similarity to the reference for a pass.")
    reference_dtype: Literal["fp64", "fp32"] = Field("fp32", description="Dtype of the CPU reference computation.")
    seeds: int = Field(1, ge=1, description="Seeded input sets per operator.")


class PlannerOverlap(_UserModel):
    """Which communication the cost model hides behind compute (step 4 may switch them on where they pay)."""

    tp: bool = Field(False, description="TP all-gather/reduce-scatter overlapped with GEMMs (default false).")
    ep: bool = Field(False, description="MoE all-to-all overlapped with another micro-batch (default false).")
    dp: bool = Field(True, description="Gradient reduction overlapped with the last backward (default true).")


RecomputeModule = Literal["core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp_act"]


class PlannerSpec(_UserModel):
    """Steps 3-4's cost-model assumptions. Unset figures come from the platform's calibrated profile when
    the store holds one (`day0 calibrate PLATFORM`), else from the datasheet defaults named below."""

    calibrate: bool = Field(
        False,
        description="Run `day0 calibrate` on the run's backend before step 3 (its profile is then used); "
        "default false: use a stored profile if any.",
    )
    profile: Literal["auto", "datasheet", "calibrated"] = Field(
        "auto",
        description="'auto': the calibrated profile if the store has one, else datasheet figures; 'calibrated' "
        "requires it.",
    )
    gemm_efficiency: dict[Literal["fp32", "bf16", "fp16", "fp8"], Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=dict,
        description="Fraction of each dtype's peak large GEMMs reach (datasheet defaults: bf16 0.8, fp8 0.65).",
    )
    attention_efficiency: float | None = Field(
        None, gt=0, le=1, description="FlashAttention fraction of the bf16 peak (default 0.5)."
    )
    hbm_bandwidth_gbps: float | None = Field(
        None, gt=0, description="Achieved device memory bandwidth, GB/s (default 3000, or calibrated)."
    )
    max_context_parallel: int = Field(8, ge=1, le=1024, description="Largest CP degree searched (default 8).")
    max_virtual_stages: int = Field(4, ge=1, le=64, description="Most virtual pipeline stages searched (default 4).")
    sequence_parallel: bool = Field(True, description="Megatron sequence parallelism with TP (default true).")
    flash_attention: bool = Field(True, description="Attention scores are never stored (default true).")
    fp8_activation_cache: bool = Field(
        False, description="With fp8 compute, cache GEMM inputs in FP8 (DeepSeek-V3 style; default false)."
    )
    selective_recompute: list[RecomputeModule] = Field(
        default_factory=lambda: list(get_args(RecomputeModule)),
        description="What selective recompute recomputes (Megatron-Core recompute modules; default all five).",
    )
    dualpipe: bool = Field(False, description="Plan for DualPipe: half the bubble, two weight copies (default false).")
    expert_max_nodes: int | None = Field(
        None, ge=1, description="Node-limited MoE routing: nodes a token may reach (default unlimited)."
    )
    overlap: PlannerOverlap = Field(default_factory=PlannerOverlap, description="Communication overlap switches.")


class PipelineSpec(_UserModel):
    apiVersion: Literal["day0/v1"] = Field("day0/v1", description="Spec format version.")
    kind: Literal["AdaptationPipeline"] = Field("AdaptationPipeline", description="Document kind.")
    metadata: Metadata = Field(description="Run name and labels.")
    model: ModelSpec = Field(
        description="The model to adapt (a configs/models name, a directory, or hf://org/name[@revision])."
    )
    platform: PlatformSpec = Field(description="Target platform: a configs/platforms name or an inline descriptor.")
    cluster: ClusterSpec = Field(
        default_factory=ClusterSpec, description="Where heavy steps run: a configs/clusters name or an inline cluster."
    )
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="The full-scale training setup steps 3-4 plan for."
    )
    parallel: Literal["auto"] | ParallelConstraints = Field(
        "auto", description="'auto' (the planner searches) or fixed degrees and limits."
    )
    planner: PlannerSpec = Field(default_factory=PlannerSpec, description="Steps 3-4's cost-model assumptions.")
    trial: TrialSpec = Field(default_factory=TrialSpec, description="Step 5's small-scale trial training.")
    inference: InferenceSpec = Field(default_factory=InferenceSpec, description="Step 6's serving targets.")
    validation: ValidationSpec = Field(
        default_factory=ValidationSpec, description="Step 2's numerical tolerances and reference."
    )
    steps: list[Step] = Field(default_factory=lambda: list(STEPS), description="Steps to run, in pipeline order.")
    storage: str = Field(
        "file://.day0", pattern=r"^(file|s3)://.+", description="Artifact store URI: file://DIR or s3://bucket/prefix."
    )

    @field_validator("storage")
    @classmethod
    def _store_uri_well_formed(cls, storage: str) -> str:
        try:
            parse_store_uri(storage)
        except StoreError as exc:
            raise ValueError(str(exc).removeprefix(f"storage {storage!r}: ")) from None
        return storage

    def fingerprint(self) -> str:
        """Stable short hash of the resolved spec: the identity of a run for resume."""
        blob = json.dumps(self.model_dump(mode="json", exclude={"steps"}), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


# --- names and references ----------------------------------------------------------------------

# A configs/ name: no path separators, no leading dot (so no '..'), bounded.
_CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# huggingface_hub's repo-id rules (no '--' or '..'), and a bounded revision.
_HUB_REF = re.compile(r"^hf://([A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?:@([\w][\w./-]{0,199}))?$")


def hub_reference(source: str) -> tuple[str, str]:
    """(repo_id, revision) of `hf://org/name[@revision]`; ValueError saying the form otherwise."""
    match = _HUB_REF.match(source)
    if not match or "--" in match[1] or ".." in source:
        raise ValueError("expected hf://org/name[@revision] (org and name of letters, digits, '-', '_', '.')")
    return match[1], match[2] or "main"


# --- loading -----------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    """A user's YAML file, bounded and strict (`day0.yamlio`): raises `SpecError` naming the file."""
    return read_user_yaml(path)


def _resolve_named(raw: dict[str, Any], field: str, folder: str, issues: list[SpecIssue]) -> None:
    """Replace `field: name` with the contents of <name>.yaml in the first of `config_dirs(folder)`
    holding it (configs/<folder>, after DAY0_CLUSTERS_DIR for clusters)."""
    value = raw.get(field)
    if not isinstance(value, str):
        return
    if not _CONFIG_NAME.match(value):
        issues.append(
            SpecIssue(
                field,
                f"{shorten(value)} is not a configs/{folder} name (letters, digits, '-', "
                "'_', '.'; no path separators); give an inline mapping for anything else",
            )
        )
        raw.pop(field)
        return
    dirs = config_dirs(folder)
    path = next((p for d in dirs if (p := d / f"{value}.yaml").is_file()), None)
    if path is None:
        known = sorted({p.stem for d in dirs for p in d.glob("*.yaml")})
        where = " or ".join(map(str, dirs))
        issues.append(
            SpecIssue(field, f"unknown {field} {value!r} in {where}; expected one of {known} or an inline mapping")
        )
        raw.pop(field)
        return
    raw[field] = load_yaml(path)


def spec_from_dict(raw: Any, source: str = "<spec>") -> PipelineSpec:
    if not isinstance(raw, dict):
        raise SpecError(source, [SpecIssue("", f"expected a mapping at the top level, got {type(raw).__name__}")])
    raw = dict(raw)
    issues: list[SpecIssue] = []
    _resolve_named(raw, "platform", "platforms", issues)
    _resolve_named(raw, "cluster", "clusters", issues)
    if isinstance(raw.get("model"), str):
        raw["model"] = {"source": raw["model"]}
    try:
        spec = PipelineSpec.model_validate(raw)
    except ValidationError as exc:
        already = {issue.field.split(".")[0] for issue in issues}
        issues.extend(i for i in map(SpecIssue.from_pydantic, exc.errors()) if i.field.split(".")[0] not in already)
        spec = None
    if issues:
        raise SpecError(source, issues)
    assert spec is not None
    return spec


def load_platform(name: str, field: str = "platform") -> PlatformSpec:
    """A platform by configs/platforms name or YAML path; `field` names the input in errors."""
    from day0.errors import UsageError

    if name.endswith((".yaml", ".yml")):  # a file the user names on the command line
        path = Path(name)
    elif _CONFIG_NAME.match(name):
        path = CONFIGS_DIR / "platforms" / f"{name}.yaml"
    else:
        raise UsageError(f"{field}: {shorten(name)} is neither a configs/platforms name nor a .yaml file")
    if not path.exists():
        known = sorted(p.stem for p in (CONFIGS_DIR / "platforms").glob("*.yaml"))
        raise UsageError(f"{field}: unknown platform {shorten(name)}; expected one of {known} or a YAML file")
    try:
        return PlatformSpec.model_validate(load_yaml(path))
    except ValidationError as exc:
        raise SpecError(str(path), [SpecIssue.from_pydantic(e) for e in exc.errors()]) from None


def load_spec(path: str | Path) -> PipelineSpec:
    path = Path(path)
    return spec_from_dict(load_yaml(path), str(path))
