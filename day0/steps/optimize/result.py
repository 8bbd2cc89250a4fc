"""Step 4's result: the optimiser's choice for step 3's best plan (`day0.steps.optimize.optimization.Optimization`)
with its verdict, files and text.

Contract: `skipped` when step 3 found no plan, `fail` when the optimized plan does not fit, else `pass`
with the techniques chosen, their effect against not using them, and the final memory per accelerator.
`files()` writes optimized-plan.yaml, which the trial step applies.
"""

from day0.core.result import Judgement, StepResult
from day0.planner.inputs import GIB, CommSettings
from day0.steps.optimize.optimization import Optimization
from day0.yamlio import safe_dump

__all__ = ["OptimizationReport"]


class OptimizationReport(Optimization, StepResult):
    STEP = "optimize"

    @classmethod
    def of(cls, optimization: Optimization) -> "OptimizationReport":
        """The step's result for the optimiser's choice (its fields as they are, nothing revalidated)."""
        return cls.model_construct(**dict(optimization))

    @classmethod
    def skipped(cls, model: str, reason: str) -> "OptimizationReport":
        return cls(
            model=model,
            plan=None,
            comm=CommSettings(),
            techniques=[],
            step_before_s=0,
            step_after_s=0,
            memory_before_bytes=0,
            memory_after_bytes=0,
            skipped_reason=f"no feasible plan: {reason}",
        )

    def judge(self) -> Judgement:
        if self.plan is None:
            return Judgement(verdict="skipped", reasons=[self.skipped_reason or "step 3 found no plan"])
        m = self.plan.memory
        used = [t for t in self.techniques if t.chosen != t.baseline]
        headline = {  # the first two are the scorecard's glance
            "techniques": ", ".join(f"{t.technique} {t.chosen}" for t in used) or "none needed",
            "memory per accelerator": f"{m.total_bytes / GIB:.1f} of {m.capacity_bytes / GIB:g} GiB",
        }
        for t in used:
            if (base := t.effect()) is not None:  # + 0.0: no "-0.0"
                saved, cost = round(-base.memory_saved_bytes / GIB, 1) + 0.0, round(-base.time_cost_s, 3) + 0.0
                headline[t.technique] = f"{t.chosen}: {saved:+.1f} GiB saved, {cost:+.3f} s per step vs {t.baseline}"
        after = self.band.label(self.step_after_s) if self.band else f"{self.step_after_s:.3g} s"
        headline["step time"] = f"{self.step_before_s:.3g} -> {after}"
        if not self.plan.feasible:
            why = (
                f"needs {m.total_bytes / GIB:.1f} GiB per accelerator, {m.capacity_bytes / GIB:g} GiB available"
                if m.total_bytes > m.capacity_bytes
                else f"needs {m.host_offload_bytes / GIB:.1f} GiB host "
                f"memory per accelerator, {m.host_capacity_bytes / GIB:g} GiB available"
            )
            return Judgement(verdict="fail", headline=headline, reasons=[f"the optimized plan does not fit: {why}"])
        return Judgement(verdict="pass", headline=headline)

    def files(self) -> dict[str, bytes]:
        return {"optimized-plan.yaml": self.to_yaml().encode()}

    def to_markdown(self) -> str:
        j = self.judge()
        lines = [
            f"# Step 4: optimisations for `{self.model}`: {j.verdict.upper()}",
            "",
            *[f"- **{j.verdict}**: {r}" for r in j.reasons],
        ]
        if self.plan is None:
            return "\n".join(lines) + "\n"
        lines += [
            f"- step time {self.step_before_s:.3f} s -> **{self.step_after_s:.3f} s**"
            + (f" (band {self._band_text()}: {self.band.basis})" if self.band else "")
            + "; memory "
            f"{self.memory_before_bytes / GIB:.1f} -> **{self.memory_after_bytes / GIB:.1f} GiB** per accelerator",
            "",
            *self._sequence_table(),
            "| technique | chosen | why | alternatives against the chosen plan (memory saved GiB / time cost s) |",
            "|---|---|---|---|",
        ]
        for t in self.techniques:  # alternatives that do not fit first
            alts = sorted((o for o in t.options if o.value != t.chosen), key=lambda o: o.feasible)
            text = "; ".join(
                f"{o.value}: {o.memory_saved_bytes / GIB:+.1f} / {o.time_cost_s:+.3f}"
                + ("" if o.feasible else " (does not fit)")
                for o in alts
            )
            lines.append(f"| {t.technique} | {t.chosen} | {t.reason} | {text or '-'} |")
        plan_only = {k: v for k, v in self.to_yaml_dict().items() if k != "frameworks"}  # "Run it" shows those
        lines += ["", "```yaml", safe_dump(plan_only).rstrip(), "```"]
        if self.frameworks is not None:
            lines += ["", *self.frameworks.to_markdown()]
        return "\n".join(lines) + "\n"

    def _band_text(self) -> str:
        assert self.band is not None
        low, high = self.band.around(self.step_after_s)
        return f"{low:.3f}-{high:.3f} s"

    def _sequence_table(self) -> list[str]:
        """The cumulative sequence: each row the plan after its technique and every one above it."""
        if len(self.sequence) < 2:
            return ["- no technique changes the plan (the rows below: each alternative against it)", ""]
        rows = [
            f"| {s.after} | {s.step_s:.3f} | {s.delta_s:+.3f} | {s.memory_bytes / GIB:.1f} |" for s in self.sequence
        ]
        total = self.sequence[-1].step_s - self.sequence[0].step_s
        return [
            "| after | step s | change s | GiB |",
            "|---|---|---|---|",
            *rows,
            f"| **total** | | **{total:+.3f}** (the changes add up) | |",
            "",
        ]
