"""Shared test inputs: the tiny DeepSeek-V3-family model's step-1 inventory (captured once per test
process, on meta tensors) and platforms built from plugin entry points in faulty_kernels.py."""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint

from day0.core.ops import OpInventory
from day0.model.build import build_meta_model, load_hf_config
from day0.model.source import resolve_model_source
from day0.model.structure import analyze_structure
from day0.paths import CONFIGS_DIR
from day0.platforms.kernels import ENTRY_POINT_GROUP, Platform
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import ModelSpec, load_yaml
from day0.steps.analyze.inventory import capture_operators
from day0.steps.analyze.result import AnalyzeResult
from day0.steps.analyze.run import analyze_model
from day0.steps.operators.layers import WholeModel

MODEL = "tiny-deepseek-v3"


@functools.cache
def tiny_inventory(dtype: str = "fp32") -> OpInventory:
    model = build_meta_model(load_hf_config(resolve_model_source(MODEL)), MODEL, dtype)
    structure = analyze_structure(model, MODEL)
    return capture_operators(model, structure.attention_kind, dtype)


@functools.cache
def _tiny_analysis() -> AnalyzeResult:
    return analyze_model(ModelSpec(source=MODEL), cpu_spec(), "fp32")


def whole_model(layers: int | None = None) -> WholeModel:
    """The tiny model for the whole-model check, as step 1 resolved it."""
    return WholeModel.from_analysis(_tiny_analysis(), layers)


def entry_point(target: str, name: str | None = None) -> EntryPoint:
    return EntryPoint(name=name or target, value=f"faulty_kernels:{target}", group=ENTRY_POINT_GROUP)


def cpu_spec(**update: object) -> PlatformSpec:
    spec = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "cpu.yaml"))
    return spec.model_copy(update=update)


def faulty_platform(*faults: str) -> Platform:
    """The CPU platform with the named faulty kernels loaded as its vendor plugin(s)."""
    return Platform.from_spec(cpu_spec(name="faulty-" + "-".join(faults)), plugins=[entry_point(f) for f in faults])
