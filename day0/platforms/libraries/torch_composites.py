"""The composites of a torch release: its wheel's `torchgen/packaged/ATen/native/native_functions.yaml`.

An op whose `dispatch:` names `CompositeExplicitAutograd` or `CompositeExplicitAutogradNonFunctional`
has one kernel for every backend, written in other aten ops: it runs on any backend that has those
(`default_backend`). One whose `dispatch:` names `CompositeImplicitAutograd`, or that has neither a
`dispatch:` section nor a `structured_delegate` (its per-backend out= kernel), decomposes into other
aten ops before reaching a backend (`decomposes`). Every other op needs a kernel of the backend's own.
"""

from __future__ import annotations

import yaml

from day0.platforms.libraries.model import Reading, day0_op_name
from day0.platforms.libraries.wheelfiles import file_of
from day0.platforms.wheels import Wheel, WheelError

__all__ = ["NATIVE_FUNCTIONS", "read"]

NATIVE_FUNCTIONS = "torchgen/packaged/ATen/native/native_functions.yaml"
_EXPLICIT = {"CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"}


def _keys(dispatch: dict[str, object]) -> set[str]:
    return {k.strip() for key in dispatch for k in str(key).split(",")}


def read(wheel: Wheel) -> Reading:
    raw = wheel.read(NATIVE_FUNCTIONS)
    groups: dict[str, set[str]] = {"default_backend": set(), "decomposes": set()}
    try:
        for entry in yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            name = day0_op_name(str(entry["func"]))
            dispatch = entry.get("dispatch")
            if dispatch is None:
                if "structured_delegate" not in entry:
                    groups["decomposes"].add(name)
            elif "CompositeImplicitAutograd" in _keys(dispatch):
                groups["decomposes"].add(name)
            elif _keys(dispatch) & _EXPLICIT:
                groups["default_backend"].add(name)
    except (yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise WheelError(
            f"{wheel.package} {wheel.version}: {NATIVE_FUNCTIONS} is not torch's op list ({exc})"
        ) from None
    return Reading(
        package=wheel.package,
        version=wheel.version,
        torch=wheel.version,
        files=[file_of(wheel, NATIVE_FUNCTIONS, raw)],
        ops={group: sorted(ops) for group, ops in groups.items()},
    )
