"""The planning problem is built once (issue 41, item 2): its costs and knob settings are derived from its
inputs, and a variant recomputes the costs only when the options change what they depend on."""

from __future__ import annotations

from day0.model.structure import ModelStructure
from day0.paths import CONFIGS_DIR
from day0.planner import PlannerOptions, PlanningProblem, cluster_figures
from day0.planner.inputs import costs_for
from day0.planner.space import knob_settings
from day0.spec.cluster import PlatformSpec
from day0.spec.pipeline import Precision, TrainingSpec, load_yaml
from tests.fixtures import paths

H100 = PlatformSpec.model_validate(load_yaml(CONFIGS_DIR / "platforms" / "h100.yaml")).hardware


def _problem(compute: str) -> PlanningProblem:
    s = ModelStructure.model_validate_json((paths.DATA / "planner" / "qwen3-30b-a3b.structure.json").read_text())
    training = TrainingSpec(seq_len=4096, global_batch=64, precision=Precision(compute=compute))
    return PlanningProblem.of(s, cluster_figures(H100, 16, 8), training, options=PlannerOptions(zero_stages=[1, 3]))


def test_the_costs_and_knobs_are_those_of_its_inputs() -> None:
    p = _problem("bf16")
    assert p.costs == costs_for(p.structure, p.options, "bf16")
    assert list(p.knobs) == knob_settings(p.options) and {k.zero_stage for k in p.knobs} == {1, 3}


def test_a_variant_recomputes_the_costs_only_when_they_change() -> None:
    p = _problem("fp8")
    dualpipe = p.with_options(p.options.model_copy(update={"dualpipe": True}))
    assert dualpipe.costs is p.costs  # the schedule does not change what a layer stores
    cached = p.with_options(p.options.model_copy(update={"fp8_activation_cache": True}))
    assert cached.costs != p.costs and cached.costs == costs_for(p.structure, cached.options, "fp8")
    fewer = p.with_options(p.options.model_copy(update={"zero_stages": [3]}))
    assert {k.zero_stage for k in fewer.knobs} == {3}
