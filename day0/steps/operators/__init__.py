"""Step 2 core: numerical precision alignment of every operator and of the whole model.

Contracts:
- `metrics` is pure maths on tensors (no torch state touched).
- A *platform* runs ops under `PlatformMode` (a `TorchDispatchMode`, in `day0.platforms`, which
  step 5 trains under too): its kernel table replaces listed aten overloads (vendor kernels,
  plugins, adaptations) and ops it lacks raise `MissingKernelError`; the reference is plain CPU at
  the reference dtype. Adaptation kernels are built by `day0.platforms.adapted`, so the trial can
  rebuild them from this step's result.
- `opcheck.check_inventory` and `layers.compare_layers` never raise for a bad op or layer: they
  record it. Results are pydantic models in `results` with `to_markdown()`.
"""

__all__: list[str] = []
