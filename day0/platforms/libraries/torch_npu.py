"""torch_npu's operator registry: `torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml`.

Its keys `supported`, `symint`, `autograd` and `quant` list the aten ops the plugin registers NPU
kernels for (a bare overload name, `as_strided` meaning the default overload only, or a dict whose
`func` is a name or a schema); `custom` lists its own `npu_*` ops (namespace `npu::`). It states no
dtypes: a registration proves the op exists, not which dtypes its kernel takes.
"""

from __future__ import annotations

import yaml

from day0.platforms.libraries.model import Reading, day0_op_name
from day0.platforms.libraries.wheelfiles import file_of, torch_pin
from day0.platforms.wheels import Wheel, WheelError

__all__ = ["REGISTRY", "read"]

REGISTRY = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
_ATEN_KEYS = ("supported", "symint", "autograd", "quant")


def _func(entry: object) -> str:
    return str(entry["func"]) if isinstance(entry, dict) else str(entry)


def read(wheel: Wheel) -> Reading:
    raw = wheel.read(REGISTRY)
    try:
        registry = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        custom = {day0_op_name(_func(e), "npu") for e in registry.get("custom") or []}
        custom_bases = {c.split("::")[1].split(".")[0] for c in custom}
        aten = set()
        for key in _ATEN_KEYS:
            for entry in registry.get(key) or []:
                name = day0_op_name(_func(entry))
                # a custom op listed again (for its SymInt signature) stays in its own namespace
                base = name.split("::")[1].split(".")[0]
                aten.add(name.replace("aten::", "npu::") if base in custom_bases else name)
    except (yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise WheelError(f"{wheel.package} {wheel.version}: {REGISTRY} is not an operator registry ({exc})") from None
    return Reading(
        package=wheel.package,
        version=wheel.version,
        torch=torch_pin(wheel),
        files=[file_of(wheel, REGISTRY, raw)],
        ops={"vendor_kernel": sorted(aten | custom)},
    )
