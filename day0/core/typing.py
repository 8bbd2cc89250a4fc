"""Names for the values whose shape is truly open, one per concept, so an open type says what it holds.

Everything else is typed precisely (a model, a tensor, a protocol); these stay open because what
they hold is decided by someone else: the user's file before a model validates it, an architecture's
config.json, the Kubernetes API. Each alias says why; any other open value carries its own reason.
"""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["DecoderStack", "Document", "HFConfigDict", "JsonObject", "KubeObject"]

Document: TypeAlias = Any
"""A YAML or JSON document as parsed, before a model validates it: any shape the file holds."""

JsonObject: TypeAlias = dict[str, Any]
"""A mapping as plain data: a YAML or JSON object before a model validates it, a model dumped for the
wire (a flow's parameters, a request body), a stored record. Its values are any JSON."""

HFConfigDict: TypeAlias = dict[str, Any]
"""A Hugging Face config.json as read (or scaled): its keys and their values vary by architecture."""

KubeObject: TypeAlias = dict[str, Any]
"""A Kubernetes object as plain data, as the API returns it (a RayCluster custom object, a manifest)."""

DecoderStack: TypeAlias = Any
"""A causal LM's decoder stack (`model.model`, or the model itself): its attributes (`layers`, norms,
embeddings) vary by architecture, and transformers leaves them untyped or `Tensor | Module`."""
