"""One planning problem: what the search, the advice and step 4's technique choice all take.

Contract: a frozen value built once (`PlanningProblem.of`) from step 1's structure, the cluster, the
training setup, the spec's pins and the planner's options, holding what is derived from them alone: the
model's costs under the options' activation policy and the memory-knob settings searched. A variant
(`with_options`, `with_cluster`, `with_constraints`) recomputes the costs only when the options change
what they depend on (activation policy, MTP modules). The cost model for one degree tuple is
`evaluate.PlanContext(problem, d)`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from day0.planner.inputs import ClusterFigures, PlannerOptions, activation_policy, costs_for
from day0.planner.model import ModelCosts
from day0.planner.space import knob_settings
from day0.planner.values import MemoryKnobs
from day0.spec.pipeline import TrainingSpec
from day0.steps.parallel.config import ParallelConstraints

if TYPE_CHECKING:
    from day0.model.structure import ModelStructure

__all__ = ["PlanningProblem"]


@dataclass(frozen=True)
class PlanningProblem:
    structure: ModelStructure
    cluster: ClusterFigures
    training: TrainingSpec
    constraints: ParallelConstraints
    options: PlannerOptions
    costs: ModelCosts  # `costs_for(structure, options, compute)`
    knobs: tuple[MemoryKnobs, ...]  # `knob_settings(options)`, in rank order

    @classmethod
    def of(
        cls,
        structure: ModelStructure,
        cluster: ClusterFigures,
        training: TrainingSpec,
        constraints: ParallelConstraints | None = None,
        options: PlannerOptions | None = None,
    ) -> PlanningProblem:
        options = options or PlannerOptions()
        costs = costs_for(structure, options, training.precision.compute)
        cons = constraints or ParallelConstraints()
        return cls(structure, cluster, training, cons, options, costs, tuple(knob_settings(options)))

    def with_options(self, options: PlannerOptions) -> PlanningProblem:
        compute = self.training.precision.compute
        same_costs = (
            activation_policy(options, compute) == activation_policy(self.options, compute)
            and options.mtp_layers == self.options.mtp_layers
        )
        costs = self.costs if same_costs else costs_for(self.structure, options, compute)
        return replace(self, options=options, costs=costs, knobs=tuple(knob_settings(options)))

    def with_cluster(self, cluster: ClusterFigures) -> PlanningProblem:
        return replace(self, cluster=cluster)

    def with_constraints(self, constraints: ParallelConstraints) -> PlanningProblem:
        return replace(self, constraints=constraints)
