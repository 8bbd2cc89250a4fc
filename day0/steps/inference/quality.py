"""The quality cost of quantisation: perplexity on held-out text and greedy next-token agreement
with the unquantised model, judged against `inference.quality`.

Greedy agreement is measured teacher-forced: both models read the same held-out windows and the
argmax next token is compared at every position. Free-running generation would compare
continuations that diverge after the first differing token, which says more about the prompt than
about the weights.
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, Field, computed_field

from day0.steps.inference.config import QualityTolerance

__all__ = ["QualityReport", "compare_quality", "windows"]


class QualityReport(BaseModel):
    text: str = Field(description="Which held-out text was read.")
    tokens: int = Field(description="Positions scored.")
    perplexity_reference: float
    perplexity_quantized: float
    token_agreement: float = Field(description="Share of positions with the same greedy next token.")
    tolerance: QualityTolerance

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def perplexity_increase(self) -> float:
        return self.perplexity_quantized / self.perplexity_reference - 1

    @property
    def failures(self) -> list[str]:
        tol, out = self.tolerance, []
        if not self.perplexity_increase <= tol.max_perplexity_increase:  # NaN fails
            out.append(
                f"perplexity rose {self.perplexity_increase:+.3%} ({self.perplexity_reference:.3f} -> "
                f"{self.perplexity_quantized:.3f}), beyond the {tol.max_perplexity_increase:.2%} tolerance"
            )
        if not self.token_agreement >= tol.min_token_agreement:
            out.append(
                f"greedy next-token agreement {self.token_agreement:.2%} over {self.tokens} positions is below "
                f"{tol.min_token_agreement:.2%}"
            )
        return out

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented computed-field form
    @property
    def passed(self) -> bool:
        return not self.failures


def windows(tokens: list[int], seq_len: int, max_windows: int) -> torch.Tensor:
    """Non-overlapping [n, seq_len + 1] windows from the start of `tokens` (inputs and their next tokens)."""
    n = min(max_windows, (len(tokens) - 1) // seq_len)
    if n < 1:
        raise ValueError(f"held-out text has {len(tokens)} tokens, fewer than one window of {seq_len + 1}")
    return torch.tensor([tokens[i * seq_len : (i + 1) * seq_len + 1] for i in range(n)], dtype=torch.long)


@torch.no_grad()
def _score(model: torch.nn.Module, batch: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(perplexity, argmax next tokens) of `model` on `batch`."""
    logits = model(batch[:, :-1]).logits.float()
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
    return math.exp(nll.item()), logits.argmax(-1)


def compare_quality(
    reference: torch.nn.Module, quantized: torch.nn.Module, batch: torch.Tensor, tolerance: QualityTolerance, text: str
) -> QualityReport:
    """Score both models on the same held-out `batch` (from `windows`)."""
    ppl_ref, top_ref = _score(reference, batch)
    ppl_q, top_q = _score(quantized, batch)
    return QualityReport(
        text=text,
        tokens=top_ref.numel(),
        perplexity_reference=ppl_ref,
        perplexity_quantized=ppl_q,
        token_agreement=(top_ref == top_q).float().mean().item(),
        tolerance=tolerance,
    )
