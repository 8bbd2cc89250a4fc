"""Platforms' operator libraries, read from the vendors' own packages, never typed by hand.

`resolve.resolve_library(spec)` turns a platform's `operator_library` (a `VendorLibrary`) into a
`model.ResolvedLibrary`: the base package's registry (`torch_npu`), the composites of the torch it
pairs with (`torch_composites`), overlays (`flag_gems`) and the spec's overrides, each op with its
kind, source and provenance. A package is read from the wheel cache, else from its committed snapshot
(`configs/platforms/libraries/<package>-<version>.json`, `snapshot`), else downloaded by pip.
Nothing here imports torch or the vendor's package: they are read as files.
"""
