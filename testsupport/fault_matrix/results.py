"""What the fault matrix records: per layer a `Detection`, per fault or clean run a `MatrixRow`, and
the `FaultMatrix` with its detection rate, false alarms and Markdown table."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Detection", "FaultMatrix", "Layer", "MatrixRow"]

Layer = Literal["numerical", "convergence", "performance"]


class Detection(BaseModel):
    layer: Layer
    caught: bool
    localised_at: str | None = None
    margin: float | None = Field(None, description="Observed over threshold: > 1 is caught (inf for NaN).")
    detail: str = ""


class MatrixRow(BaseModel):
    fault: str
    expected: Layer | None = Field(description="None for a clean run.")
    detections: list[Detection]

    @property
    def caught_by(self) -> list[Layer]:
        return [d.layer for d in self.detections if d.caught]

    def detection(self, layer: Layer) -> Detection | None:
        return next((d for d in self.detections if d.layer == layer), None)


class FaultMatrix(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="strings")

    rows: list[MatrixRow]
    clean: list[MatrixRow] = Field(description="Clean runs (one per seed and setup): any caught is a false alarm.")
    seconds: float

    @property
    def detection_rate(self) -> float:
        rows = [r for r in self.rows if r.expected is not None]
        return sum(r.expected in r.caught_by for r in rows) / len(rows) if rows else 0.0

    @property
    def false_alarms(self) -> int:
        return sum(bool(r.caught_by) for r in self.clean)

    def table(self) -> str:
        lines = [
            "| fault | expected layer | caught by | localised at | margin to the threshold |",
            "|---|---|---|---|---:|",
        ]
        for r in self.rows + self.clean:
            d = r.detection(r.expected) if r.expected else None
            lines.append(
                f"| {r.fault} | {r.expected or 'none (clean)'} | {', '.join(r.caught_by) or 'nothing'} | "
                f"{(d.localised_at if d else None) or '-'} | {_margin(d)} |"
            )
        return "\n".join(lines)


def _margin(d: Detection | None) -> str:
    if d is None or d.margin is None:
        return "-"
    return "NaN/Inf" if math.isinf(d.margin) else f"{d.margin:.2f}x"
