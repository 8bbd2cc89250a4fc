"""The model (`day0.model`): sources, structure, remote code."""
