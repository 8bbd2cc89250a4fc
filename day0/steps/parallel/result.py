"""Step 3's result: the planner's search (`day0.planner.results.PlanSearch`: ranked plans, or why none
fits) with its verdict, files and text.

Contract: `fail` when no plan fits (why, and the accelerators needed when known), else `pass` with the
chosen degrees, memory per accelerator against capacity, step time and MFU. `files()` writes plan.yaml
and memory.png; `to_markdown()` is the step's section, which `day0 plan` prints too.
"""

from day0.core.result import Judgement, StepResult
from day0.planner.inputs import GIB
from day0.planner.results import MEMORY_TERMS, PlanSearch, degrees_label
from day0.steps.parallel.text import plan_table, report_markdown

__all__ = ["PlanReport"]


class PlanReport(PlanSearch, StepResult):
    STEP = "parallel"

    @classmethod
    def of(cls, search: PlanSearch) -> "PlanReport":
        """The step's result for a search (its fields as they are, nothing copied or revalidated)."""
        return cls.model_construct(**dict(search))

    def judge(self) -> Judgement:
        cap = self.cluster.hardware.figure("memory_gib")
        if self.best is None:
            headline = {"plan": f"none fits {self.cluster.accelerators} accelerators of {cap:g} GiB"}
            if self.closest_infeasible:
                headline["memory per accelerator"] = (
                    f"{self.closest_infeasible[0].memory.total_bytes / GIB:.1f} of {cap:g} GiB (leanest setup)"
                )
            if self.min_accelerators:
                headline["minimum accelerators"] = str(self.min_accelerators)
            return Judgement(verdict="fail", reasons=[self.message], headline=headline)
        p = self.best
        return Judgement(
            verdict="pass",
            headline={  # the first two are the scorecard's glance
                "degrees": degrees_label(p.parallel),
                "step time": self.band.label(p.time.step_s) if self.band else f"{p.time.step_s:.3g} s",
                "memory per accelerator": f"{p.memory.total_bytes / GIB:.1f} of {cap:g} GiB",
                "MFU": f"{p.time.mfu:.1%}",
            },
        )

    def files(self) -> dict[str, bytes]:
        """plan.yaml, and memory.png: each memory term of the top three plans (the report embeds it)."""
        out = {"plan.yaml": self.to_yaml().encode()}
        if self.plans:
            from day0.plots import grouped_bars

            terms = [t for t in MEMORY_TERMS if any(getattr(p.memory, t) for p in self.plans[:3])]
            capacity = self.cluster.hardware.figure("memory_gib")
            out["memory.png"] = grouped_bars(
                f"{self.model}: memory per accelerator by term (capacity {capacity:g} GiB)",
                [t.removesuffix("_bytes").replace("_", " ") for t in terms],
                {
                    f"#{p.rank} TP{p.parallel.tensor_parallel} PP{p.parallel.pipeline_parallel} "
                    f"EP{p.parallel.expert_parallel} {p.memory_knobs.recompute}": [
                        getattr(p.memory, t) / GIB for t in terms
                    ]
                    for p in self.plans[:3]
                },
                "GiB",
            )
        return out

    def table(self, top: int = 10) -> str:
        """The ranked plans; when none fits, the closest setups first, each with why it does not fit."""
        return plan_table(self, top)

    def to_markdown(self, top: int = 10, images: bool = True) -> str:
        """The step's section; `images=False` leaves out the link to memory.png, for a caller that
        shows the text without the step's files (`day0 plan` prints it)."""
        return report_markdown(self, self.judge(), top, images)
