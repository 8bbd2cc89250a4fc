"""Step 3's cost model predicting step 5's own candidate, beside what the candidate measured.

The step-time prediction rests on the platform's figures: a calibrated profile (`day0 calibrate`)
when the store holds one, else the datasheet's. A datasheet prediction is labelled so wherever it is
shown ("datasheet, uncalibrated"), with the commands that give the calibrated figure: on a CPU the
datasheet misses the eager ops' per-call cost, so its error says little about the cost model.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["CostCheck"]


class CostCheck(BaseModel):
    """Step 3's cost model predicting the candidate's own configuration, beside what it measured."""

    source: str = Field(description="Which figures the prediction used: 'datasheet' or 'calibrated <date>'.")
    predicted_step_s: float
    measured_step_s: float | None = Field(None, description="Steady-state seconds per optimizer step.")
    predicted_peak_bytes: float
    measured_peak_bytes: int | None = Field(
        None, description="Largest per-worker training memory measured: counted from the tensors, else RSS growth."
    )
    calibrate_command: str | None = Field(
        None, description="What gives the calibrated figure when the prediction used the datasheet."
    )

    @property
    def calibrated(self) -> bool:
        return self.source.startswith("calibrated")

    @staticmethod
    def _error(predicted: float, measured: float | None) -> float | None:
        return None if not measured else predicted / measured - 1

    @property
    def step_time_error(self) -> float | None:
        return self._error(self.predicted_step_s, self.measured_step_s)

    @property
    def memory_error(self) -> float | None:
        return self._error(self.predicted_peak_bytes, self.measured_peak_bytes)

    @property
    def figures(self) -> str:
        """Where the step time's figures came from, as the report labels it."""
        return self.source if self.calibrated else "datasheet, uncalibrated"

    def describe(self) -> dict[str, str]:
        def pair(pred: str, meas: str | None, err: float | None) -> str:
            return f"predicted {pred}, measured {meas or 'n/a'}" + (f" ({err:+.0%})" if err is not None else "")

        ms = f"{self.measured_step_s:.3f} s" if self.measured_step_s else None
        mb = f"{self.measured_peak_bytes / 2**20:.0f} MiB" if self.measured_peak_bytes else None
        step = pair(f"{self.predicted_step_s:.3f} s", ms, self.step_time_error) + f", {self.figures}"
        if not self.calibrated and self.calibrate_command:
            step += f"; calibrated: {self.calibrate_command}"
        return {
            "step time": step,
            "peak memory": pair(f"{self.predicted_peak_bytes / 2**20:.0f} MiB", mb, self.memory_error),
        }

    def reason(self) -> str | None:
        """One line for the trial's reasons when the step time came from the datasheet."""
        if self.calibrated:
            return None
        err = self.step_time_error
        off = f" ({err:+.0%} vs measured)" if err is not None else ""
        how = f"; for the calibrated figure run {self.calibrate_command}" if self.calibrate_command else ""
        return f"cost model step time{off} used the platform's datasheet figures, uncalibrated{how}"
