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
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from day0.core.precision import COMPUTE_DTYPES, DEFAULT_TOLERANCES, DType
from day0.errors import SpecError, SpecIssue, StoreError, shorten
from day0.paths import CONFIGS_DIR
from day0.store import parse_store_uri
from day0.yamlio import read_user_yaml

__all__ = [
    "STEPS",
    "Accelerator",
    "ClusterSpec",
    "ElasticRange",
    "InferenceSpec",
    "Metadata",
    "ModelSpec",
    "NodePool",
    "ParallelConstraints",
    "PipelineSpec",
    "PlatformSpec",
    "Precision",
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
    Defaults follow public practice: mean relative error < 2% from step 21 on."""

    loss_mean_rel: float = Field(0.02, gt=0, description="Mean relative loss error after warm-up.")
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
    ttft_p99_ms: float = Field(2000, gt=0, description="Time to first token, 99th percentile, ms.")
    tpot_p99_ms: float = Field(100, gt=0, description="Time per output token, 99th percentile, ms.")
    min_throughput_tok_s: float | None = Field(None, gt=0, description="Least output throughput, tokens/s.")


class InferenceSpec(_UserModel):
    engine: Literal["auto", "transformers", "vllm", "sglang"] = Field(
        "auto", description="Serving engine; 'auto' picks by platform."
    )
    quantization: Literal["none", "int8-weight", "fp8"] = Field(
        "none", description="Weight quantisation of the served model."
    )
    max_batch: int = Field(8, ge=1, description="Most concurrent sequences served.")
    slo: SLO = Field(default_factory=SLO, description="Latency and throughput targets.")


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
    """Replace `field: name` with the contents of configs/<folder>/<name>.yaml."""
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
    path = CONFIGS_DIR / folder / f"{value}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (CONFIGS_DIR / folder).glob("*.yaml"))
        issues.append(SpecIssue(field, f"unknown {field} {value!r}; expected one of {known} or an inline mapping"))
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
