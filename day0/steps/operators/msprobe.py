"""msprobe's accuracy standards, read from its wheel (`mindstudio-probe`, through
`day0.platforms.wheels`: fetched, never installed, never imported) or from day0's snapshot of them
(`configs/tolerances/msprobe-<version>.json`, written by `make tolerance-snapshots`), so that step 2
can judge an op the way msprobe's `api_accuracy_checker` would (`validation.tolerance: msprobe`).

What is read (members of `msprobe/pytorch/api_accuracy_checker/`):
- `compare/api_precision_standard.yaml`: which API names each standard lists (BinaryCompareStandard,
  AbsoluteThreshStandard, ULPStandard, ThousandthStandard, AccumulativeErrorStandard).
- `compare/api_precision_threshold.yaml`: per-API, per-dtype (`torch.float32`, `torch.float16`,
  `torch.bfloat16`) `rtol`, `small_value` and `small_value_atol` of the absolute-threshold standard.
- `precision_standard/standard_register.py`, parsed with `ast` (not run): the order in which
  `StandardRegistry._get_standard_category` picks a standard. Earlier releases looked the
  API up in the lists for every floating output (first match in the order absolute, binary, ULP,
  thousandth, accumulative; an API in no list: benchmark). In 26.2.0 a floating output
  (fp16/bf16/fp32/fp64) returns `benchmark` before the lists are read: the lists then only reach
  outputs that are neither floating, integer nor bool. `float_outputs_benchmarked` records which.
  Integer and bool outputs are always binary-compared; fp8 outputs ULP-compared (day0 runs fp8 at bf16).

What is not read but transcribed in `day0.steps.operators.msprobe_judge` (Python constants of
26.2.0's `standard_config.py`, `algorithm.py`, `compare_utils.py`, `core/common/const.py`): the ULP
parameters and pass shares, the benchmark standard's small-value thresholds, minimum errors and ratio
limits per API level. 26.2.0's absolute-threshold code uses `StandardConfig`'s per-dtype powers of
two, not the threshold YAML (which no module of 26.2.0 loads); day0 takes the YAML's per-API figures,
which earlier releases read and which agree with those powers of two to rounding (fp32 rtol 1e-6 vs
2**-20) except bf16's small_value_atol (YAML 1e-5, code 1e-16).

msprobe names torch APIs (`add`, `softmax`, `__matmul__`); day0 names aten overloads
(`aten::add.Tensor`). An overload is judged under its base name (`add.Tensor` and `add_.Tensor` as
`add` and `add_`, which msprobe lists with equal figures); aten's own names for msprobe's aliases
map onto them (`_ALIASES`: `gt` -> `greater`, `constant_pad_nd` -> `pad`, ...). Python operator
names (`__add__`) reach aten as their function and need no entry. A composite API that aten
decomposes before day0 sees it (`flatten`, `square`, `linear`, `one_hot`, `type_as`) is judged as the
ops it decomposed into, as msprobe would judge those ops; `convolution` is not mapped onto
`conv1d`/`conv2d` (it also serves conv3d and transposed convolutions, which msprobe does not list).
"""

import ast
import hashlib
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from day0.errors import UsageError
from day0.paths import CONFIGS_DIR
from day0.platforms.wheels import Wheel, WheelError, cached_wheel, fetch_wheel

__all__ = [
    "PACKAGE",
    "SNAPSHOT_DIR",
    "ApiThreshold",
    "MsprobeStandards",
    "Standard",
    "api_name",
    "load_standards",
    "read_wheel",
    "snapshot_path",
    "write_snapshot",
]

PACKAGE = "mindstudio-probe"
SNAPSHOT_DIR = CONFIGS_DIR / "tolerances"
_ROOT = "msprobe/pytorch/api_accuracy_checker/"
STANDARD_MEMBER = _ROOT + "compare/api_precision_standard.yaml"
THRESHOLD_MEMBER = _ROOT + "compare/api_precision_threshold.yaml"
REGISTRY_MEMBER = _ROOT + "precision_standard/standard_register.py"

Standard = Literal[
    "absolute_threshold",
    "binary_consistency",
    "ulp_compare",
    "thousandth_threshold",
    "accumulative_error_compare",
    "benchmark",
]
# The YAML's section per standard, in the order StandardRegistry.api_standard_function_map tries them.
_SECTIONS: dict[str, Standard] = {
    "AbsoluteThreshStandard": "absolute_threshold",
    "BinaryCompareStandard": "binary_consistency",
    "ULPStandard": "ulp_compare",
    "ThousandthStandard": "thousandth_threshold",
    "AccumulativeErrorStandard": "accumulative_error_compare",
}
_DTYPES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16"}
_ALIASES = {
    "gt": "greater",
    "ge": "greater_equal",
    "lt": "less",
    "le": "less_equal",
    "ne": "not_equal",
    "gt_": "greater_",
    "ge_": "greater_equal_",
    "lt_": "less_",
    "le_": "less_equal_",
    "ne_": "not_equal_",
    "constant_pad_nd": "pad",
    "max_pool3d_with_indices": "max_pool3d",
    "_prelu_kernel": "prelu",
}


class ApiThreshold(BaseModel):
    """The absolute-threshold standard's figures for one API at one dtype."""

    model_config = ConfigDict(extra="forbid")

    rtol: float = Field(gt=0)
    small_value: float = Field(gt=0, description="|reference| at or below this is a small value.")
    small_value_atol: float = Field(gt=0, description="Absolute error a small value may have.")


class Member(BaseModel):
    path: str
    sha256: str


class MsprobeStandards(BaseModel):
    """The standards of one msprobe release, with where they were read from."""

    model_config = ConfigDict(extra="forbid")

    package: str = PACKAGE
    version: str
    wheel: str = Field(description="The wheel's file name.")
    wheel_sha256: str
    members: list[Member] = Field(description="The members read, with their sha256.")
    standards: dict[Standard, list[str]] = Field(description="Standard -> the API names it lists, in msprobe's order.")
    thresholds: dict[str, dict[str, ApiThreshold]] = Field(description="API -> day0 dtype -> figures.")
    float_outputs_benchmarked: bool = Field(
        description="The registry sends a floating output to the benchmark standard before reading its lists."
    )

    def standard(self, api: str, floating: bool) -> Standard:
        """The standard msprobe's registry picks for `api` with a floating (fp16/bf16/fp32) output or not."""
        if not floating:
            return "binary_consistency"  # an integer or bool output: compared element by element
        if self.float_outputs_benchmarked:
            return "benchmark"
        return next((s for s, apis in self.standards.items() if api in apis), "benchmark")

    def listed(self, api: str) -> Standard | None:
        return next((s for s, apis in self.standards.items() if api in apis), None)


def api_name(op: str) -> str:
    """msprobe's name for an aten op: `aten::add.Tensor` -> `add`, `aten::gt.Scalar` -> `greater`."""
    base = op.split("::", 1)[-1].split(".")[0]
    return _ALIASES.get(base, base)


def _yaml(wheel: Wheel, member: str) -> object:
    try:
        return yaml.safe_load(wheel.read(member))
    except yaml.YAMLError as exc:
        raise WheelError(f"{wheel.package} {wheel.version}: {member} is not YAML: {exc}") from None


def _float_outputs_benchmarked(source: bytes, member: str) -> bool:
    """Whether `_get_standard_category` returns `benchmark` for a floating output before its API lists."""
    tree = ast.parse(source)
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_get_standard_category"]
    if not found:
        raise WheelError(f"{member} has no _get_standard_category: day0 cannot tell how this msprobe picks a standard")
    for stmt in found[0].body:
        if isinstance(stmt, ast.For):
            return False  # the API lists come first
        if (
            isinstance(stmt, ast.If)
            and "float" in ast.unparse(stmt.test)
            and any(isinstance(s, ast.Return) and "BENCHMARK" in ast.unparse(s) for s in stmt.body)
        ):
            return True
    return False


def read_wheel(wheel: Wheel) -> MsprobeStandards:
    """The standards in an msprobe wheel (see the module docstring for what is read)."""
    listed = _yaml(wheel, STANDARD_MEMBER)
    raw = _yaml(wheel, THRESHOLD_MEMBER)
    if not isinstance(listed, dict) or not isinstance(raw, dict):
        raise WheelError(f"{wheel.package} {wheel.version}: {STANDARD_MEMBER} or {THRESHOLD_MEMBER} is not a mapping")
    standards: dict[Standard, list[str]] = {
        s: [str(a) for a in listed.get(section) or []] for section, s in _SECTIONS.items()
    }
    try:
        thresholds = {
            str(api): {_DTYPES[d]: ApiThreshold.model_validate(v) for d, v in per_dtype.items() if d in _DTYPES}
            for api, per_dtype in raw.items()
        }
    except (AttributeError, ValidationError) as exc:
        raise WheelError(f"{wheel.package} {wheel.version}: {THRESHOLD_MEMBER}: {exc}") from None
    registry = wheel.read(REGISTRY_MEMBER)
    return MsprobeStandards(
        version=wheel.version,
        wheel=wheel.path.name,
        wheel_sha256=wheel.sha256,
        members=[
            Member(path=m, sha256=hashlib.sha256(wheel.read(m)).hexdigest())
            for m in (STANDARD_MEMBER, THRESHOLD_MEMBER, REGISTRY_MEMBER)
        ],
        standards=standards,
        thresholds=thresholds,
        float_outputs_benchmarked=_float_outputs_benchmarked(registry, REGISTRY_MEMBER),
    )


def snapshot_path(version: str, directory: Path = SNAPSHOT_DIR) -> Path:
    return directory / f"msprobe-{version}.json"


def write_snapshot(version: str, directory: Path = SNAPSHOT_DIR) -> Path:
    """Fetch msprobe `version`'s wheel (cached after) and write its standards' snapshot."""
    standards = read_wheel(fetch_wheel(PACKAGE, version))
    path = snapshot_path(version, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(standards.model_dump_json(indent=1) + "\n")
    return path


def load_standards(version: str, directory: Path = SNAPSHOT_DIR) -> MsprobeStandards:
    """msprobe `version`'s standards: from its cached wheel, else from day0's snapshot; never downloads.
    Neither is a `UsageError` naming `validation.msprobe_version` and the command that caches it."""
    if not re.fullmatch(r"[0-9A-Za-z.+!-]+", version):
        raise UsageError(f"validation.msprobe_version: {version!r} is not a version")
    wheel = cached_wheel(PACKAGE, version)
    if wheel is not None:
        return read_wheel(wheel)
    path = snapshot_path(version, directory)
    if not path.is_file():
        raise UsageError(
            f"validation.msprobe_version: msprobe {version} (validation.tolerance: msprobe) is neither in the "
            f"wheel cache nor snapshotted ({path}); cache it where an index is reachable: "
            f"make tolerance-snapshots MSPROBE_VERSIONS={version}"
        )
    try:
        standards = MsprobeStandards.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise UsageError(f"validation.msprobe_version: {path} is not an msprobe snapshot: {exc}") from None
    if standards.version != version:
        raise UsageError(f"validation.msprobe_version: {path} holds msprobe {standards.version}, not {version}")
    return standards


if __name__ == "__main__":  # make tolerance-snapshots
    import sys

    for v in sys.argv[1:]:
        print(write_snapshot(v))
