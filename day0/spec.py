"""The declarative pipeline spec (`apiVersion: day0/v1`, `kind: AdaptationPipeline`).

Contract: everything a user writes is validated here with `extra="forbid"`; named references
(`platform: cpu`, `cluster: local`, `model: tiny-deepseek-v3`) resolve against `configs/`.
`load_spec` raises `SpecError` listing *every* problem with file, field path and expectation.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from day0.errors import SpecError, SpecIssue
from day0.paths import CONFIGS_DIR

__all__ = [
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
    "STEPS",
    "TrainingSpec",
    "TrialSpec",
    "ValidationSpec",
    "load_spec",
    "load_yaml",
    "spec_from_dict",
]

STEPS: tuple[str, ...] = ("analyze", "operators", "parallel", "optimize", "trial", "inference")

DType = Literal["fp32", "bf16", "fp16", "fp8"]


class _UserModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Metadata(_UserModel):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
                      description="Run name: lowercase letters, digits and dashes (a DNS label).")
    labels: dict[str, str] = Field(default_factory=dict)


class ModelSpec(_UserModel):
    source: str = Field(description="A name in configs/models/, a local dir with config.json, "
                                    "or hf://org/name[@revision].")
    trust_remote_code: bool = Field(False, description="Allow the repo's own modelling code.")
    trusted_orgs: list[str] = Field(default_factory=list,
                                    description="Orgs whose remote code may run when trust_remote_code is on.")


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
    name: str
    device_type: str = Field(description="torch device type: cpu, cuda, npu, musa ...")
    distributed_backend: Literal["gloo", "nccl", "hccl", "mccl", "xccl"] = "gloo"
    vendor_plugin: str | None = Field(None, description="Entry point in group 'day0.platforms' "
                                                        "that registers the device (e.g. torch_npu).")
    hardware: HardwareSpec
    operator_library: Literal["probe"] | list[OperatorSupport] = Field(
        "probe", description="'probe' asks the dispatcher for kernels on the device; "
                             "or a declared list of supported operators.")


class Accelerator(_UserModel):
    resource: str = Field("nvidia.com/gpu", description="Kubernetes extended resource name.")
    per_node: int = Field(ge=1, description="Accelerators per node.")
    memory_gib: float = Field(gt=0, description="Memory per accelerator, GiB.")


class ElasticRange(_UserModel):
    min: int = Field(0, ge=0)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> ElasticRange:
        if self.min > self.max:
            raise ValueError(f"elastic.min ({self.min}) must be <= elastic.max ({self.max})")
        return self


class Toleration(_UserModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class NodePool(_UserModel):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$")
    accelerator: Accelerator
    nodes: int | None = Field(None, ge=0, description="Fixed node count (omit for elastic pools).")
    elastic: ElasticRange | None = Field(None, description="Elastic pool range, scaled by the Ray autoscaler.")
    cpus_per_node: int = Field(16, ge=1)
    memory_gib_per_node: float = Field(256, gt=0)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)

    @model_validator(mode="after")
    def _sized(self) -> NodePool:
        if (self.nodes is None) == (self.elastic is None):
            raise ValueError("set exactly one of 'nodes' (fixed pool) or 'elastic' (elastic pool)")
        return self

    @property
    def max_nodes(self) -> int:
        return self.nodes if self.nodes is not None else self.elastic.max  # type: ignore[union-attr]


class ClusterSpec(_UserModel):
    backend: Literal["local", "kuberay"] = "local"
    namespace: str = "day0"
    address: str | None = Field(None, description="Existing Ray cluster address (local backend).")
    keep_cluster: bool = Field(False, description="Keep the RayCluster after the run (kuberay).")
    node_pools: list[NodePool] = Field(default_factory=list)
    ready_timeout_s: float = Field(600, gt=0)


class Precision(_UserModel):
    compute: DType = "bf16"
    master_weights: Literal["fp32", "bf16"] = "fp32"


class TrainingSpec(_UserModel):
    seq_len: int = Field(4096, ge=1)
    global_batch: int = Field(1024, ge=1, description="Sequences per optimizer step.")
    micro_batch: int = Field(1, ge=1)
    precision: Precision = Field(default_factory=Precision)


class ParallelConstraints(_UserModel):
    tensor_parallel: int | None = Field(None, ge=1)
    pipeline_parallel: int | None = Field(None, ge=1)
    expert_parallel: int | None = Field(None, ge=1)
    context_parallel: int | None = Field(None, ge=1)
    data_parallel: int | None = Field(None, ge=1)
    max_pipeline_parallel: int | None = Field(None, ge=1)
    accelerators: int | None = Field(None, ge=1, description="Use this many accelerators (default: all).")


class TrialScale(_UserModel):
    layers: int | None = Field(None, ge=1)
    hidden: int | None = Field(None, ge=8)
    experts: int | None = Field(None, ge=1)


class TrialTolerance(_UserModel):
    loss_mean_rel: float = Field(0.02, gt=0, description="Mean relative loss error after warm-up.")
    first_step_abs: float = Field(0.005, gt=0)
    first_step_rel: float = Field(0.005, gt=0)
    warmup_steps: int = Field(20, ge=0, description="Steps excluded from the mean error.")


class TrialSpec(_UserModel):
    scale: TrialScale = Field(default_factory=TrialScale)
    steps: int = Field(50, ge=1)
    workers: int = Field(1, ge=1)
    seq_len: int = Field(128, ge=8)
    micro_batch: int = Field(4, ge=1)
    learning_rate: float = Field(3e-4, gt=0)
    checkpoint_every: int = Field(10, ge=1)
    seed: int = 0
    reference: str = Field("cpu-fp32", description="'cpu-fp32' or a store URI of a saved curve.")
    dataset: str | None = Field(None, description="Text file path/URI; default: pydoc_data.topics.")
    tolerance: TrialTolerance = Field(default_factory=TrialTolerance)


class SLO(_UserModel):
    ttft_p99_ms: float = Field(2000, gt=0)
    tpot_p99_ms: float = Field(100, gt=0)
    min_throughput_tok_s: float | None = Field(None, gt=0)


class InferenceSpec(_UserModel):
    engine: Literal["auto", "transformers", "vllm", "sglang"] = "auto"
    quantization: Literal["none", "int8-weight", "fp8"] = "none"
    max_batch: int = Field(8, ge=1)
    slo: SLO = Field(default_factory=SLO)


class DTypeTolerance(_UserModel):
    rtol: float = Field(gt=0)
    atol: float = Field(gt=0)


def _default_tolerances() -> dict[str, DTypeTolerance]:
    # torch.testing.assert_close defaults per dtype.
    return {
        "fp32": DTypeTolerance(rtol=1.3e-6, atol=1e-5),
        "bf16": DTypeTolerance(rtol=1.6e-2, atol=1e-5),
        "fp16": DTypeTolerance(rtol=1e-3, atol=1e-5),
    }


class ValidationSpec(_UserModel):
    tolerances: dict[DType, DTypeTolerance] = Field(default_factory=_default_tolerances)
    min_cosine: float = Field(0.99, gt=0, le=1)
    reference_dtype: Literal["fp64", "fp32"] = "fp32"
    seeds: int = Field(1, ge=1)


class PipelineSpec(_UserModel):
    apiVersion: Literal["day0/v1"] = "day0/v1"
    kind: Literal["AdaptationPipeline"] = "AdaptationPipeline"
    metadata: Metadata
    model: ModelSpec
    platform: PlatformSpec
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    parallel: Literal["auto"] | ParallelConstraints = "auto"
    trial: TrialSpec = Field(default_factory=TrialSpec)
    inference: InferenceSpec = Field(default_factory=InferenceSpec)
    validation: ValidationSpec = Field(default_factory=ValidationSpec)
    steps: list[Literal["analyze", "operators", "parallel", "optimize", "trial", "inference"]] = Field(
        default_factory=lambda: list(STEPS), description="Steps to run, in pipeline order.")
    storage: str = Field("file://.day0", pattern=r"^(file|s3)://.+",
                         description="Artifact store URI: file://DIR or s3://bucket/prefix.")

    def fingerprint(self) -> str:
        """Stable short hash of the resolved spec: the identity of a run for resume."""
        blob = json.dumps(self.model_dump(mode="json", exclude={"steps"}), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


# --- loading -----------------------------------------------------------------------------------

def load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SpecError(str(path), [SpecIssue("", "file not found")]) from None
    except yaml.YAMLError as exc:
        raise SpecError(str(path), [SpecIssue("", f"not valid YAML: {exc}")]) from None


def _resolve_named(raw: dict[str, Any], field: str, folder: str, issues: list[SpecIssue]) -> None:
    """Replace `field: name` with the contents of configs/<folder>/<name>.yaml."""
    value = raw.get(field)
    if not isinstance(value, str):
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


def load_spec(path: str | Path) -> PipelineSpec:
    path = Path(path)
    return spec_from_dict(load_yaml(path), str(path))
