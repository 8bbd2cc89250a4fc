"""The foundation: `day0.core`, `day0.settings`, `day0.yamlio`."""
