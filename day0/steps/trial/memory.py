"""Training memory counted from the tensors, the quantity the cost model's memory terms describe:
parameters, gradients and optimizer states (exact: unique storages) and the activations autograd saves
for the backward (unique storages that are not parameters, alive together at the end of the forward).

Why not the process RSS: on the CPU its growth also holds the allocator's caches, glibc arenas, library
pages touched late and the framework's buffers, none of which the model predicts; the trial reports it
beside this count, not instead of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from pydantic import BaseModel

__all__ = ["SavedActivations", "TrainingState", "state_bytes", "unique_bytes"]


class TrainingState(BaseModel):
    parameters: int
    gradients: int
    optimizer_states: int
    activations: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_states + self.activations


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 parameter (a DTensor), else `t`."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None else t


def unique_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` on this rank (views and shared storages counted once)."""
    storages = [_local(t).untyped_storage() for t in tensors]
    return sum({s.data_ptr(): s.nbytes() for s in storages}.values())


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """(parameters, gradients, optimizer states) in bytes, once the step's gradients and states exist."""
    params = list(model.parameters())
    grads = [p.grad for p in params if p.grad is not None]
    states = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    return unique_bytes(params), unique_bytes(grads), unique_bytes(states)


class SavedActivations:
    """Bytes of what autograd saves while `recording()` is active, parameters excluded."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._params = {_local(p).untyped_storage().data_ptr() for p in model.parameters()}
        self._saved: dict[int, int] = {}

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in self._params:
            self._saved[storage.data_ptr()] = storage.nbytes()
        return t

    @contextmanager
    def recording(self) -> Iterator[None]:
        self._saved.clear()
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield

    @property
    def bytes(self) -> int:
        return sum(self._saved.values())
