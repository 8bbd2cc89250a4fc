"""A run of a spec: `context` (its identity, records and manifest, `RunContext`), `folder` (its id
and folder from the spec alone) and `lock` (one running `day0 run` per run folder). Import each
name from its module."""
