"""Which module of a model each dispatched op runs in, forward and backward: step 1's inventory
names each op's modules with it, and step 5's traffic count sums bytes per decoder layer with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

import torch

from day0.core.typing import DecoderStack

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["ScopeRecorder", "module_scopes"]


class ScopeRecorder(Protocol):
    """What records ops by module: `scope` names the module running now."""

    scope: str


@contextmanager
def module_scopes(model: PreTrainedModel, recorder: ScopeRecorder, kept: list[tuple[int, str]]) -> Iterator[None]:
    """Set `recorder.scope` to the module each op runs in: top-level units and decoder layers `kept`
    ((index, kind) each), forward and backward."""
    inner: DecoderStack = getattr(model, "model", model)
    units: list[tuple[str, torch.nn.Module]] = [
        (f"layers.{index} ({kind})", layer) for (index, kind), layer in zip(kept, inner.layers)
    ]
    units += [(n, m) for n, m in inner.named_children() if n != "layers"]
    units += [(n, m) for n, m in model.named_children() if n != "model"]
    handles = []
    for label, module in units:

        def enter(*_: object, _label: str = label) -> None:
            recorder.scope = _label

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_full_backward_pre_hook(enter))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
