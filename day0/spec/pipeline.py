"""The declarative pipeline spec (`apiVersion: day0/v1`, `kind: AdaptationPipeline`).

Contract: everything a user writes is validated here with `extra="forbid"`; named references
(`platform: cpu`, `cluster: local`, `model: tiny-deepseek-v3`) resolve against `configs/`.
`load_spec` raises `SpecError` listing *every* problem with file, field path and expectation.
"""

import hashlib
import json
import re
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, ValidationError, field_validator

from day0.core.precision import DType
from day0.core.typing import Document, JsonObject
from day0.errors import SpecError, SpecIssue, StoreError, shorten
from day0.model.source import hub_reference
from day0.paths import CONFIGS_DIR, config_dirs
from day0.spec.base import Text, UserModel
from day0.spec.cluster import (
    ClusterSpec,
    PlatformSpec,
)
from day0.steps.inference.config import InferenceSpec
from day0.steps.operators.config import ValidationSpec
from day0.steps.parallel.config import ParallelConstraints, PlannerSpec
from day0.steps.trial.config import TrialSpec
from day0.store import parse_store_uri
from day0.yamlio import read_user_yaml

__all__ = [
    "STEPS",
    "Metadata",
    "ModelSpec",
    "PipelineSpec",
    "Precision",
    "Step",
    "TrainingSpec",
    "load_platform",
    "load_spec",
    "load_yaml",
    "spec_from_dict",
]

Step = Literal["analyze", "operators", "parallel", "optimize", "trial", "inference"]
STEPS: tuple[Step, ...] = get_args(Step)


class Metadata(UserModel):
    name: Text = Field(
        pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="Run name: lowercase letters, digits and dashes (a DNS label).",
    )
    labels: dict[Text, Text] = Field(default={}, description="Free-form labels copied into the run's records.")


class ModelSpec(UserModel):
    source: Text = Field(
        description="A name in configs/models/, a local dir with config.json, or hf://org/name[@revision]."
    )
    trust_remote_code: bool = Field(False, description="Allow the repo's own modelling code.")
    trusted_orgs: list[Text] = Field(
        default=[], description="Orgs whose remote code may run when trust_remote_code is on."
    )

    @field_validator("source")
    @classmethod
    def _hub_reference_well_formed(cls, source: str) -> str:
        if source.startswith("hf://"):
            hub_reference(source)
        return source


class Precision(UserModel):
    compute: DType = Field("bf16", description="Compute dtype of matmuls and activations.")
    master_weights: Literal["fp32", "bf16"] = Field("fp32", description="Dtype of the optimizer's master weights.")


class TrainingSpec(UserModel):
    seq_len: int = Field(4096, ge=1, le=100_000_000, description="Sequence length, tokens.")
    global_batch: int = Field(1024, ge=1, le=1_000_000_000, description="Sequences per optimizer step.")
    micro_batch: int = Field(
        1, ge=1, le=1_000_000, description="Sequences per micro-batch per data-parallel rank (at most a million)."
    )
    precision: Precision = Field(default_factory=Precision, description="Compute and master-weight dtypes.")


class PipelineSpec(UserModel):
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
    storage: Text = Field(
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
# --- loading -----------------------------------------------------------------------------------


def load_yaml(path: Path) -> Document:
    """A user's YAML file, bounded and strict (`day0.yamlio`): raises `SpecError` naming the file."""
    return read_user_yaml(path)


def _resolve_named(raw: JsonObject, field: str, folder: str, issues: list[SpecIssue]) -> None:
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


def spec_from_dict(raw: object, source: str = "<spec>") -> PipelineSpec:
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
