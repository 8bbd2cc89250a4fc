"""Step 3 on a spec alone (no run context, no backend): the spec's `planner:` and `parallel:` sections
and a calibrated profile turned into the planner's inputs, and the ranked plans. `run.py` calls it
for a run; `day0 plan` calls it directly, without Ray, Prefect or torch in its process.

Precedence of the figures the cost model uses: the spec's `planner:` section sets the assumptions, its
`software` profile those it does not write (and the ZeRO stages searched); a calibrated profile
replaces the datasheet's figures unless `planner.profile` is `datasheet`; figures the user wrote in
`planner:` win over all. A figure the platform file marks unpublished (null) that no
profile measured is a `UsageError` naming it, before the search.
"""

from day0.errors import UsageError
from day0.model.structure import ModelStructure
from day0.planner.advice import elastic_points, next_steps
from day0.planner.inputs import ClusterFigures, CommSettings, PlannerOptions, cluster_from_spec
from day0.planner.pins import constraints_for, pin_options
from day0.planner.problem import PlanningProblem
from day0.planner.profile import CalibratedProfile, apply_profile
from day0.planner.search import plan_parallelism
from day0.planner.uncertainty import step_time_band
from day0.spec.cluster import PLANNER_FIGURES
from day0.spec.pipeline import PipelineSpec
from day0.steps.parallel.config import SOFTWARE_PROFILES, SearchChoices
from day0.steps.parallel.result import PlanReport

__all__ = ["plan_for_spec", "planner_inputs"]


def plan_for_spec(
    spec: PipelineSpec, structure: ModelStructure, profile: CalibratedProfile | None = None
) -> PlanReport:
    """Ranked plans for `spec` over step 1's structure, with the elastic pool's two ends and what next."""
    cluster, options = planner_inputs(spec, profile)
    problem = PlanningProblem.of(structure, cluster, spec.training, constraints_for(spec), options)
    search = plan_parallelism(problem)
    elastic = elastic_points(problem, search)
    advice = next_steps(problem, search, spec.platform.name)
    calibrated = profile is not None and spec.planner.profile != "datasheet"
    band = step_time_band("calibrated" if calibrated else "datasheet", spec.planner.software)
    return PlanReport.of(search.model_copy(update={"elastic": elastic, "advice": advice}).with_band(band))


def planner_inputs(
    spec: PipelineSpec, profile: CalibratedProfile | None = None
) -> tuple[ClusterFigures, PlannerOptions]:
    """The cluster figures and planner options for `spec` (see the module contract for precedence)."""
    p, cluster = spec.planner, cluster_from_spec(spec)
    options = PlannerOptions(
        **{name: getattr(p, name) for name in SearchChoices.model_fields},
        selective_modules=list(p.selective_recompute),
        comm=CommSettings(tp_overlap=p.overlap.tp, ep_overlap=p.overlap.ep, dp_overlap=p.overlap.dp),
    )
    if p.software is not None:  # its figures where the spec writes none; pins and calibration come after
        sw = SOFTWARE_PROFILES[p.software]
        figures = {k: v for k, v in sw.planner_figures().items() if k not in p.model_fields_set}
        # its GEMM efficiencies over the datasheet's: a dtype the spec writes is merged over both below
        gemm = options.gemm_efficiency | {str(dtype): value for dtype, value in sw.gemm_efficiency.items()}
        options = options.model_copy(update=figures | {"gemm_efficiency": gemm})
    options = pin_options(spec, options)
    # a written assumption is kept as a pin is: the search does not try the other value (space.with_techniques_on)
    written = {name: "planner." + name for name in ("fp8_activation_cache", "dualpipe") if name in p.model_fields_set}
    if written:
        options = options.model_copy(update={"pinned": written | options.pinned})
    if p.profile == "calibrated" and profile is None:
        raise UsageError(
            f"planner.profile: 'calibrated' but the store has no profile for platform {spec.platform.name!r}; "
            f"run `day0 calibrate {spec.platform.name}` first"
        )
    if profile is not None and p.profile != "datasheet":
        hardware, options = apply_profile(cluster.hardware, options, profile)
        note = f"{profile.describe()} used"
        cluster = cluster.model_copy(update={"hardware": hardware, "notes": [*cluster.notes, note]})
    for name in PLANNER_FIGURES:  # before the search: a figure nobody published is asked for, never assumed
        cluster.hardware.figure(name, spec.platform.name)
    efficiency: dict[str, float] = dict(options.gemm_efficiency)
    efficiency.update({str(dtype): value for dtype, value in p.gemm_efficiency.items()})
    update: dict[str, object] = {"gemm_efficiency": efficiency}
    if p.attention_efficiency is not None:
        update["attention_efficiency"] = p.attention_efficiency
    if p.hbm_bandwidth_gbps is not None:
        update["hbm_bandwidth_gbps"] = p.hbm_bandwidth_gbps
    return cluster, options.model_copy(update=update)
